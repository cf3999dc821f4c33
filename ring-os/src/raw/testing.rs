//! Checks shared by the tests of the memories in this folder.

use core::time::Duration;
use std::time::Instant;

use ring_core::{Consumer, Memory, Producer};

use crate::wait::FutexWait;

/// Blocking both ways over two rings, every wait parking at once (one park of up to 10 s, no
/// spinning): `ask` → `asked` carries a number, the echo thread sends it back through `answer`
/// → `answered`, 3000 times. A lost wake-up costs a 10 s timeout and fails the check, or,
/// where this process's sleeps are bounded (`barrier::nap`: it mapped a marked ring), a nap of
/// up to 20 ms: the rounds must then finish within 30 s (about 0.1 s here; wake-ups lost
/// throughout would take 60 s). The caller holds `MEMBARRIER_TESTS` where the parks issue the
/// barrier.
pub(crate) fn parking_ping_pong<M: Memory + Send>(
    ask: &mut Producer<M>,
    asked: &mut Consumer<M>,
    answer: &mut Producer<M>,
    answered: &mut Consumer<M>,
) {
    const ROUNDS: u32 = 3000;
    let started = Instant::now();
    std::thread::scope(|s| {
        let echo = s.spawn(move || {
            let mut buf = [0u8; 64];
            for _ in 0..ROUNDS {
                let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
                let n = asked
                    .copy(&mut buf, wait)
                    .map_err(|e| format!("{e:?}"))?
                    .len;
                answer
                    .try_publish(&buf[..n])
                    .map_err(|e| format!("{e:?}"))?;
            }
            Ok::<(), String>(())
        });
        let mut buf = [0u8; 64];
        for i in 0..ROUNDS {
            ask.try_publish(&i.to_le_bytes()).unwrap();
            let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
            let n = answered.copy(&mut buf, wait).unwrap().len;
            assert_eq!(&buf[..n], &i.to_le_bytes());
        }
        echo.join().unwrap().unwrap();
    });
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "{ROUNDS} rounds took {took:?}: wake-ups were lost"
    );
}
