//! Blocking pub/sub across two processes: 1000 messages of varying size, all received in order.
use ring_os::prelude::*;

type Result<T = ()> = core::result::Result<T, Box<dyn core::error::Error>>;
const N: u64 = 1000;

fn message(i: u64) -> Vec<u8> {
    vec![i as u8; 1 + (i as usize * 37) % 4096]
}

fn publish(name: &str) -> Result {
    let ring = Ring::builder(name).slots(16).slot_size(4096).create()?;
    let mut child = std::process::Command::new(std::env::current_exe()?);
    let mut child = child.arg(name).spawn()?;
    let mut publisher = ring.publisher()?;
    if !publisher.wait_for_subscribers(1, core::time::Duration::from_secs(10)) {
        return Err("no subscriber came".into());
    }
    (0..N).try_for_each(|i| publisher.send(&message(i)).map(drop))?;
    publisher.close(); // complete: the subscriber drains the ring, then is disconnected
    let ok = child.wait()?.success();
    println!("published {N}; subscriber ok: {ok}");
    ok.then_some(())
        .ok_or_else(|| "the subscriber failed".into())
}

fn subscribe(name: &str) -> Result {
    let ring = Ring::builder(name).open()?;
    let mut seq = 0;
    for msg in ring.subscriber(DeliveryClass::Gating)?.iter() {
        let msg = msg?;
        if (msg.seq, &msg.data) != (seq, &message(seq)) {
            return Err(format!("message {} is not message {seq}, whole", msg.seq).into());
        }
        seq += 1;
    }
    let done = (seq == N).then_some(());
    done.ok_or_else(|| format!("{seq} of {N} messages").into())
}

fn main() {
    let arg = std::env::args().nth(1);
    let name = format!("example-pubsub-{}", std::process::id());
    if let Err(e) = arg.map_or_else(|| publish(&name), |ring| subscribe(&ring)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
