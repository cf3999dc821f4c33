//! What ring-core's test binaries share: owner ids, the rings they build and the handles they
//! open on them. Each binary uses some of these (`mod common;`), hence `dead_code`.
#![allow(dead_code, reason = "each test binary uses a different part")]

use core::ops::Range;
use std::sync::Arc;

use ring_core::{
    Config, Consumer, Copied, DeliveryClass, HeapSegment, Memory, OpenJoin, OwnerId, Producer,
};

/// Owner id `n` (the producer is 1 in every test, consumers 2 and up).
pub fn id(n: u64) -> OwnerId {
    OwnerId::new(n).unwrap()
}

/// A heap ring of `slots` slots of `cap` bytes and a 4-entry consumer table.
pub fn seg(slots: u32, cap: u32) -> HeapSegment {
    HeapSegment::new(&Config::new(slots, cap).with_consumers(4), id(1)).unwrap()
}

/// A heap ring of `config`, created by owner 1.
pub fn ring(config: &Config) -> HeapSegment {
    HeapSegment::new(config, id(1)).unwrap()
}

/// Message `i`: 150 bytes of `i`, longer than the inline words (in the payload area of a
/// 200-byte slot).
pub fn msg(i: u8) -> [u8; 150] {
    [i; 150]
}

/// The producer of `mem`, owner 1.
pub fn producer<M: OpenJoin>(mem: M) -> Producer<M> {
    Producer::new(mem, id(1)).unwrap()
}

/// A consumer of `class` on `mem`, owner `owner`.
pub fn consumer<M: OpenJoin>(mem: M, class: DeliveryClass, owner: u64) -> Consumer<M> {
    Consumer::new(mem, class, id(owner)).unwrap()
}

/// A member of `mem`'s group `group`, owner `owner`.
pub fn member<M: OpenJoin>(mem: M, group: &str, owner: u64) -> Consumer<M> {
    Consumer::join_group(mem, group, id(owner)).unwrap()
}

/// Publishes message `i` ([`msg`]`(i as u8)`) for each `i` of `seqs`.
pub fn publish_msgs<M: Memory>(p: &mut Producer<M>, seqs: Range<u64>) {
    for i in seqs {
        p.try_publish(&msg(i as u8)).unwrap();
    }
}

/// The producer of `mem` (owner 1) and, registered in order after it, a consumer of each of
/// `classes` (owners 2, 3, …).
pub fn open<M: OpenJoin + Clone, const N: usize>(
    mem: M,
    classes: [DeliveryClass; N],
) -> (Producer<M>, [Consumer<M>; N]) {
    let p = producer(mem.clone());
    let mut owner = 1;
    let consumers = classes.map(|class| {
        owner += 1;
        consumer(mem.clone(), class, owner)
    });
    (p, consumers)
}

/// `N` members of `mem`'s group `group`, joined in order (owners 2, 3, …).
pub fn members<M: OpenJoin + Copy, const N: usize>(mem: M, group: &str) -> [Consumer<M>; N] {
    let mut owner = 1;
    [(); N].map(|()| {
        owner += 1;
        member(mem, group, owner)
    })
}

/// A shared segment with its producer and `N` consumers.
pub type Shared<S, const N: usize> = (Arc<S>, Producer<Arc<S>>, [Consumer<Arc<S>>; N]);

/// `seg`, shared, with [`open`]'s producer and consumers on it (the handles keep it alive).
pub fn open_shared<S: OpenJoin, const N: usize>(
    seg: S,
    classes: [DeliveryClass; N],
) -> Shared<S, N> {
    let s = Arc::new(seg);
    let (p, consumers) = open(Arc::clone(&s), classes);
    (s, p, consumers)
}

/// Copies `c`'s next message out (into a 256-byte buffer): what the read reports, and the
/// message's bytes.
pub fn copy_next<M: Memory>(c: &mut Consumer<M>) -> (Copied, Vec<u8>) {
    let mut buf = [0u8; 256];
    let got = c.try_copy(&mut buf).unwrap();
    (got, buf[..got.len].to_vec())
}

/// Publishes the one-byte message `[i]` for each `i` of `seqs`.
pub fn publish_bytes<M: Memory>(p: &mut Producer<M>, seqs: Range<u8>) {
    for i in seqs {
        p.try_publish(&[i]).unwrap();
    }
}

/// The producer of `mem` (owner 1), with group `group` created and messages `seqs`
/// ([`publish_msgs`]) published before anyone joins.
pub fn grouped<M: OpenJoin>(mem: M, group: &str, seqs: Range<u64>) -> Producer<M> {
    let mut p = producer(mem);
    p.create_group(group).unwrap();
    publish_msgs(&mut p, seqs);
    p
}
