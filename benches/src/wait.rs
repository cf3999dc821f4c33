//! Bounded busy-waiting shared by the polling transports.

use crate::BenchError;
use std::time::Instant;

/// Spins between yields. Two cores shared with other work: a polling peer must yield now and then
/// or it can starve the process it is waiting for.
const SPINS_PER_YIELD: u32 = 512;

/// Polls `ready` until it returns `Some`, spinning with `spin_loop` hints and yielding every
/// [`SPINS_PER_YIELD`] polls; fails once `deadline` has passed.
pub fn spin_until<T>(
    deadline: Instant,
    what: &str,
    mut ready: impl FnMut() -> Result<Option<T>, BenchError>,
) -> Result<T, BenchError> {
    let mut spins = 0u32;
    loop {
        if let Some(v) = ready()? {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins % SPINS_PER_YIELD == 0 {
            if Instant::now() > deadline {
                return Err(BenchError::timeout(what));
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn returns_value_and_times_out() {
        let mut n = 0;
        let v = spin_until(Instant::now() + Duration::from_secs(5), "n", || {
            n += 1;
            Ok((n == 3).then_some(n))
        });
        assert_eq!(v.unwrap(), 3);
        let t = spin_until::<()>(Instant::now() + Duration::from_millis(20), "never", || {
            Ok(None)
        });
        assert!(matches!(t, Err(BenchError::Timeout { .. })));
    }
}
