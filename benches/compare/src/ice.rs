//! iceoryx2 publish-subscribe: `iceoryx2` (busy-polling subscriber) and `iceoryx2-event` (the
//! subscriber sleeps in its event listener; the publisher notifies after every send).
//!
//! Payloads are `[u8]` slices loaned from the publisher's data segment and written in place
//! before the timed publish, which is what zero-copy use of iceoryx2 looks like; the subscriber
//! reads the sample where it lies.

use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;
use ring_benches::case::{Case, Metric, Transport, THROUGHPUT_BATCH};
use ring_benches::ctl::Setup;
use ring_benches::link::{
    check, first_setup, pattern, peer_entry, stamped_message, AtPublish, Link, Pending, Rx, Tx,
};
use ring_benches::wait::spin_until;
use ring_benches::BenchError;
use std::time::{Duration, Instant};

const NAME: &str = "iceoryx2";

type Pub = Publisher<ipc::Service, [u8], ()>;
type Sub = Subscriber<ipc::Service, [u8], ()>;
/// A sending end's event notifier (`iceoryx2-event` only).
type Notify = Option<Notifier<ipc::Service>>;
/// A receiving end's event listener (`iceoryx2-event` only).
type Listen = Option<Listener<ipc::Service>>;

fn err(e: impl core::fmt::Display) -> BenchError {
    BenchError::transport(NAME, e)
}

/// One direction of a link: a pub-sub service and, for the event flavour, an event service.
struct Services {
    pubsub: iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>,
    event: Option<iceoryx2::service::port_factory::event::PortFactory<ipc::Service>>,
}

fn services(
    node: &Node<ipc::Service>,
    name: &str,
    subscribers: usize,
    depth: usize,
    event: bool,
) -> Result<Services, BenchError> {
    let sname: ServiceName = name.try_into().map_err(|e| err(format!("{name}: {e:?}")))?;
    let pubsub = node
        .service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .max_publishers(1)
        .max_subscribers(subscribers)
        .history_size(0)
        .subscriber_max_buffer_size(depth)
        .subscriber_max_borrowed_samples(1)
        .enable_safe_overflow(false)
        .open_or_create()
        .map_err(|e| err(format!("{name}: {e:?}")))?;
    let event = if event {
        let ename: ServiceName = format!("{name}.ev")
            .as_str()
            .try_into()
            .map_err(|e| err(format!("{name}: {e:?}")))?;
        Some(
            node.service_builder(&ename)
                .event()
                .max_notifiers(1)
                .max_listeners(subscribers)
                .open_or_create()
                .map_err(|e| err(format!("{name} event: {e:?}")))?,
        )
    } else {
        None
    };
    Ok(Services { pubsub, event })
}

struct IceTx {
    publisher: Pub,
    notifier: Notify,
    buf: Vec<u8>,
    seq: u64,
}

impl IceTx {
    fn new(publisher: Pub, notifier: Notify, bytes: usize) -> Self {
        Self {
            publisher,
            notifier,
            buf: pattern(bytes),
            seq: 0,
        }
    }
}

impl Tx for IceTx {
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        let src = stamped_message(&mut self.buf, NAME, len, self.seq)?;
        let sample = self.publisher.loan_slice_uninit(len).map_err(err)?;
        let sample = sample.write_from_slice(src);
        at_publish()?;
        sample.send().map_err(err)?;
        if let Some(n) = &self.notifier {
            n.notify().map_err(|e| err(format!("notify: {e:?}")))?;
        }
        self.seq += 1;
        Ok(())
    }
}

struct IceRx {
    transport: Transport,
    subscribers: Vec<Sub>,
    listeners: Vec<Listen>,
    seq: Vec<u64>,
}

impl IceRx {
    fn new(transport: Transport, subscribers: Vec<Sub>, listeners: Vec<Listen>) -> Self {
        let seq = vec![0; subscribers.len()];
        Self {
            transport,
            subscribers,
            listeners,
            seq,
        }
    }
}

impl Rx for IceRx {
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError> {
        let transport = self.transport;
        let sub = peer_entry(&mut self.subscribers, transport, peer)?;
        let listener = peer_entry(&mut self.listeners, transport, peer)?;
        let seq = peer_entry(&mut self.seq, transport, peer)?;
        let take = || -> Result<Option<()>, BenchError> {
            match sub.receive().map_err(err)? {
                Some(sample) => {
                    check(sample.payload(), len, *seq, transport)?;
                    Ok(Some(()))
                }
                None => Ok(None),
            }
        };
        match listener {
            None => spin_until(deadline, "an iceoryx2 sample", take)?,
            Some(l) => loop {
                if take()?.is_some() {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(BenchError::timeout("an iceoryx2 event"));
                }
                l.timed_wait(|_| {}, left.min(Duration::from_millis(100)))
                    .map_err(|e| err(format!("listener: {e:?}")))?;
            },
        }
        *seq += 1;
        Ok(())
    }
}

/// Everything one end keeps alive: the node and services outlive the ports.
struct End {
    _node: Node<ipc::Service>,
    _services: Vec<Services>,
}

struct Kept<T> {
    inner: T,
    _end: std::rc::Rc<End>,
}

impl<T: Tx> Tx for Kept<T> {
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        self.inner.send(len, at_publish)
    }
}

/// The link over `tx` and `rx`, which keep `end` (the node and services) alive as long as
/// either lives.
fn kept_link(end: End, tx: IceTx, rx: IceRx) -> Link {
    let end = std::rc::Rc::new(end);
    Link {
        tx: Box::new(Kept {
            inner: tx,
            _end: std::rc::Rc::clone(&end),
        }),
        rx: Box::new(KeptRx {
            inner: rx,
            _end: end,
        }),
    }
}

struct KeptRx<T> {
    inner: T,
    _end: std::rc::Rc<End>,
}

impl<T: Rx> Rx for KeptRx<T> {
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError> {
        self.inner.recv(peer, len, deadline)
    }
}

fn node() -> Result<Node<ipc::Service>, BenchError> {
    set_log_level(LogLevel::Error);
    NodeBuilder::new()
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .map_err(|e| err(format!("node: {e:?}")))
}

fn publisher(s: &Services, max: usize) -> Result<(Pub, Notify), BenchError> {
    let p = s
        .pubsub
        .publisher_builder()
        .initial_max_slice_len(max)
        .max_loaned_samples(1)
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()
        .map_err(|e| err(format!("publisher: {e:?}")))?;
    let n = s.event.as_ref().map(|ev| ev.notifier_builder().create());
    let n = n.transpose().map_err(|e| err(format!("notifier: {e:?}")))?;
    Ok((p, n))
}

fn subscriber(s: &Services, depth: usize) -> Result<(Sub, Listen), BenchError> {
    let sub = s
        .pubsub
        .subscriber_builder()
        .buffer_size(depth)
        .create()
        .map_err(|e| err(format!("subscriber: {e:?}")))?;
    let l = s.event.as_ref().map(|ev| ev.listener_builder().create());
    let l = l.transpose().map_err(|e| err(format!("listener: {e:?}")))?;
    Ok((sub, l))
}

/// Subscriber buffer depth for `case`. For throughput it is as deep as a whole batch: with a
/// 256-deep buffer and `RetryUntilDelivered`, `iceoryx2-event` stalled for good at message 257
/// (the publisher never delivered it; every listener wait timed out with an empty subscriber),
/// while busy-polling `iceoryx2` did not. A batch-deep buffer means the publisher never meets
/// backpressure, which flatters iceoryx2 slightly against the ring's 256 slots.
fn depth(case: &Case) -> usize {
    match case.metric {
        Metric::Throughput => THROUGHPUT_BATCH + 8,
        _ => case.depth,
    }
}

fn down_name(s: &Setup) -> String {
    format!("{}/down", s.tag)
}

fn up_name(s: &Setup, child: usize) -> String {
    format!("{}/up{child}", s.tag)
}

/// Parent side, first half (see [`ring_benches::link::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let first = first_setup(setups)?;
    let transport = first.transport;
    let event = transport == Transport::Iceoryx2Event;
    let case = first.case.clone();
    let node = node()?;
    let down = services(&node, &down_name(first), setups.len(), depth(&case), event)?;
    let (publisher, notifier) = publisher(&down, case.down_bytes())?;
    let mut subscribers = Vec::new();
    let mut listeners = Vec::new();
    let mut all = vec![];
    for s in setups.iter() {
        let up = services(&node, &up_name(s, s.child), 1, depth(&case), event)?;
        let (sub, l) = subscriber(&up, depth(&case))?;
        subscribers.push(sub);
        listeners.push(l);
        all.push(up);
    }
    all.push(down);
    let end = End {
        _node: node,
        _services: all,
    };
    Ok(Box::new(move |_| {
        // The children's subscribers exist now: connect to them before the first send.
        publisher
            .update_connections()
            .map_err(|e| err(format!("update_connections: {e:?}")))?;
        let tx = IceTx::new(publisher, notifier, case.down_bytes());
        Ok(kept_link(
            end,
            tx,
            IceRx::new(transport, subscribers, listeners),
        ))
    }))
}

/// Child side (see [`ring_benches::link::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    let event = s.transport == Transport::Iceoryx2Event;
    let case = &s.case;
    let node = node()?;
    let down = services(&node, &down_name(s), s.children, depth(case), event)?;
    let (sub, l) = subscriber(&down, depth(case))?;
    let up = services(&node, &up_name(s, s.child), 1, depth(case), event)?;
    let (publisher, notifier) = publisher(&up, case.up_bytes())?;
    publisher
        .update_connections()
        .map_err(|e| err(format!("update_connections: {e:?}")))?;
    let end = End {
        _node: node,
        _services: vec![down, up],
    };
    let tx = IceTx::new(publisher, notifier, case.up_bytes());
    Ok(kept_link(
        end,
        tx,
        IceRx::new(s.transport, vec![sub], vec![l]),
    ))
}
