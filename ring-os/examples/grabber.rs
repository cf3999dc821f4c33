//! A latest-only frame grabber: 1920x1080 BGRA frames drawn in place and read zero-copy.
use ring_os::prelude::*;

const FRAME: usize = 1920 * 1080 * 4;
const FRAMES: u64 = 120;

fn run() -> Result<(), Box<dyn core::error::Error>> {
    let ring = Ring::memfd()
        .slots(3)
        .slot_size(FRAME as u32)
        .pin_only(true)
        .create()?;
    let mut grabber = ring.subscriber(DeliveryClass::LatestOnly)?;
    let mut renderer = ring.publisher()?;
    let render = std::thread::spawn(move || {
        (0..FRAMES).try_for_each(|n| {
            let mut frame = renderer.loan(FRAME, core::time::Duration::from_secs(10))?;
            frame.bytes().fill(n as u8); // draw straight into the slot
            frame.send().map(drop)
        })?;
        renderer.close(); // the stream is complete (dropping without this would abort it)
        Ok::<_, SendTimeoutError>(())
    });
    let (mut delivered, mut whole, mut inside) = (0u64, 0u64, 0u64);
    while let Ok(frame) = grabber.recv_pinned() {
        let px = frame.bytes();
        delivered += 1;
        whole += u64::from(px.len() == FRAME && px.iter().all(|&b| b == frame.seq() as u8));
        inside += u64::from(ring.contains(px.as_ptr()) && ring.contains(&px[FRAME - 1]));
    }
    render.join().map_err(|_| "the renderer panicked")??;
    let skipped = grabber.missed();
    println!(
        "delivered {delivered} + skipped {skipped} of {FRAMES}; whole {whole}; in place {inside}"
    );
    let ok = delivered + skipped == FRAMES && whole == delivered && inside == delivered;
    ok.then_some(())
        .ok_or_else(|| "a frame was torn, lost or copied".into())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
