//! `ringctl list` and `ringctl clean` on Windows. A named ring is a section in this session's
//! namespace: it exists while some process holds a handle to it and vanishes with the last one,
//! so no ring outlives its participants and there is nothing stale to list or clean. (Win32 does
//! not enumerate the object namespace either.) File rings are files: remove one with `del` once
//! `ringctl inspect` shows no live role.

use crate::cli::{CleanArgs, ListArgs};
use crate::error::Result;

/// What Windows keeps of a ring, said once for both commands.
const NOTE: &str = "on Windows a named ring is a section that vanishes with its last handle: \
                    none outlives its processes, so there is nothing stale to list or clean";

/// Runs `ringctl list`: no ring can be stale; says why (JSON: an empty array).
pub fn list(args: &ListArgs) -> Result<()> {
    if args.json {
        println!("[]");
    } else {
        println!("no rings listed: {NOTE}");
    }
    Ok(())
}

/// Runs `ringctl clean`: nothing to remove; says why.
pub fn clean(args: &CleanArgs) -> Result<()> {
    let what = if args.dry_run {
        "nothing removed (dry run)"
    } else {
        "0 stale ring(s) removed"
    };
    println!("{what}: {NOTE}");
    Ok(())
}
