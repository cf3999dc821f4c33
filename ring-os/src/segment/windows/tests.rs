//! Windows segments under Wine or Windows: exclusive named sections that vanish with their
//! last handle, the commit limit, file segments, their owner-only DACL, refused options.

use std::os::windows::io::AsRawHandle as _;

use super::*;

fn name(tag: &str) -> SegmentName {
    SegmentName::new(&format!("test-seg-{}-{tag}", std::process::id())).unwrap()
}

#[test]
fn named_sections_are_exclusive_shared_and_vanish_with_their_last_handle() {
    let n = name("named");
    let a = Segment::create_named(&n, 5000, CreateOptions::new()).unwrap();
    assert_eq!(a.len(), 8192, "rounded up to a page");
    assert!(matches!(
        Segment::create_named(&n, 4096, CreateOptions::new()),
        Err(Error::AlreadyExists { .. })
    ));
    let b = Segment::open_named(&n, SizeCheck::AtLeast(8192)).unwrap();
    assert!(matches!(
        Segment::open_named(&n, SizeCheck::Exactly(4096)),
        Err(Error::SizeMismatch { .. })
    ));
    // One section, two views: a write through one is seen through the other.
    // SAFETY: both views are 8192 bytes and live; a plain byte store/load in a test that
    // owns both.
    unsafe {
        a.as_ptr().as_ptr().add(100).write_volatile(0x5a);
        assert_eq!(b.as_ptr().as_ptr().add(100).read_volatile(), 0x5a);
    }
    assert_eq!(b.probe(Role::Creator), Liveness::Alive);
    drop(a);
    drop(b);
    assert!(matches!(
        Segment::open_named(&n, SizeCheck::AtLeast(1)),
        Err(Error::NotFound { .. })
    ));
    // The name is free again.
    Segment::create_named(&n, 4096, CreateOptions::new()).unwrap();
}

#[test]
fn exhausting_the_commit_limit_is_no_space_at_create() {
    // 2^40 bytes (1 TiB) exceeds any commit limit.
    match Segment::create_named(&name("huge"), 1 << 40, CreateOptions::new()) {
        Err(Error::NoSpace { needed, .. }) => assert_eq!(needed, 1 << 40),
        other => panic!("expected NoSpace, got {other:?}"),
    }
}

#[test]
fn file_segments_round_trip_and_refuse_reuse() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("shmring-test-{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let a = Segment::create_file(&path, 4096, CreateOptions::new()).unwrap();
    assert!(matches!(
        Segment::create_file(&path, 4096, CreateOptions::new()),
        Err(Error::AlreadyExists { .. })
    ));
    let b = Segment::open_file(&path, SizeCheck::Exactly(4096)).unwrap();
    assert_eq!(
        a.roles().key(),
        b.roles().key(),
        "same file, same role mutexes"
    );
    b.check_len().unwrap();
    assert_eq!(b.probe(Role::Creator), Liveness::Alive);
    drop(b);
    a.unlink().unwrap();
    drop(a);
    assert!(!path.exists());
}

/// The DACL of the file open as `file`, in SDDL.
fn dacl_of(file: &std::fs::File) -> String {
    use windows_sys::Win32::Foundation::{LocalFree, ERROR_SUCCESS};
    use windows_sys::Win32::Security::Authorization::{
        ConvertSecurityDescriptorToStringSecurityDescriptorW, GetSecurityInfo, SDDL_REVISION_1,
        SE_FILE_OBJECT,
    };
    use windows_sys::Win32::Security::{DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR};
    let mut sd: PSECURITY_DESCRIPTOR = core::ptr::null_mut();
    // SAFETY: a valid file handle; null for the parts not asked for; `sd` a valid out
    // pointer, freed with LocalFree below.
    let rc = unsafe {
        GetSecurityInfo(
            file.as_raw_handle().cast(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            &raw mut sd,
        )
    };
    assert_eq!(rc, ERROR_SUCCESS, "GetSecurityInfo");
    let mut text: *mut u16 = core::ptr::null_mut();
    // SAFETY: `sd` came from GetSecurityInfo; `text` a valid out pointer (LocalFree below).
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            sd,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &raw mut text,
            core::ptr::null_mut(),
        )
    };
    assert_ne!(
        ok, 0,
        "ConvertSecurityDescriptorToStringSecurityDescriptorW"
    );
    // SAFETY: `text` is a NUL-terminated UTF-16 string from the call above.
    let sddl = unsafe {
        let mut n = 0;
        while *text.add(n) != 0 {
            n += 1;
        }
        String::from_utf16_lossy(core::slice::from_raw_parts(text, n))
    };
    // SAFETY: both were allocated by the calls above with LocalAlloc.
    unsafe {
        LocalFree(text.cast());
        LocalFree(sd);
    }
    sddl
}

#[test]
#[ignore = "Wine does not keep a file's DACL (it reports one made from the Unix mode bits, \
            D:(A;;FA;;;SY)(A;;FA;;;user)); run on Windows with --ignored"]
fn file_segments_admit_only_their_creator() {
    let path = std::env::temp_dir().join(format!("shmring-acl-{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _seg = Segment::create_file(&path, 4096, CreateOptions::new()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let sddl = dacl_of(&file);
    // A protected DACL with one allow entry (for the creating user), nothing inherited
    // from the directory: the counterpart of mode 0600.
    assert!(sddl.starts_with("D:P"), "{sddl}");
    assert_eq!(sddl.matches("(A;").count(), 1, "{sddl}");
    assert!(!sddl.contains(";ID;"), "inherited entries: {sddl}");
    drop(file);
    // A plain file in the same directory inherits (the control: the check can fail).
    let plain = path.with_extension("plain");
    let control = std::fs::File::create(&plain).unwrap();
    let control_sddl = dacl_of(&control);
    drop(control);
    let _ = std::fs::remove_file(&plain);
    assert_ne!(control_sddl, sddl);
    drop(_seg);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn huge_pages_and_zero_lengths_are_refused() {
    assert!(matches!(
        Segment::create_memfd(4096, CreateOptions::new().huge_pages(true)),
        Err(Error::HugePages { .. })
    ));
    assert!(matches!(
        Segment::create_memfd(0, CreateOptions::new()),
        Err(Error::BadLength { .. })
    ));
}
