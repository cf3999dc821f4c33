//! The wire format's tests: round trips, every header field, and hostile frames.

use super::*;

fn sample() -> Header {
    let mut h = Header::data(DeliveryClass::SkipOnLag, 9, u64::MAX - 1, 3, [u64::MAX, 0]);
    h.len = 1234;
    h
}

#[test]
fn round_trip_every_kind_and_class() {
    for class in [
        DeliveryClass::Gating,
        DeliveryClass::LatestOnly,
        DeliveryClass::SkipOnLag,
    ] {
        let mut h = sample();
        h.class = class;
        assert_eq!(Header::decode(&h.encode(), 1234), Ok(h));
        let close = Header {
            kind: Kind::Close,
            len: 0,
            ..h
        };
        assert_eq!(Header::decode(&close.encode(), 0), Ok(close));
        let abort = Header {
            kind: Kind::Abort,
            len: 0,
            code: 77,
            ..h
        };
        assert_eq!(Header::decode(&abort.encode(), 0), Ok(abort));
    }
}

#[test]
fn each_bad_field_is_named() {
    let good = sample().encode();
    let bad = |at: usize, v: u8| {
        let mut b = good;
        b[at] = v;
        Header::decode(&b, 1234)
    };
    assert_eq!(bad(0, b'X'), Err(WireError::Magic));
    assert_eq!(bad(4, 3), Err(WireError::Version(3)));
    assert_eq!(bad(4, 0), Err(WireError::Version(0)));
    // Kind 3 (batch) exists from version 2 on.
    assert_eq!(bad(5, 3), Err(WireError::Field("kind")));
    assert_eq!(bad(5, 4), Err(WireError::Field("kind")));
    assert_eq!(bad(6, 3), Err(WireError::Field("class")));
    assert_eq!(bad(7, 1), Err(WireError::Field("reserved")));
    assert_eq!(bad(63, 1), Err(WireError::Field("reserved")));
    assert_eq!(bad(60, 1), Err(WireError::Field("code")));
    assert_eq!(bad(48, 0xff), Err(WireError::Field("start")));
    let mut zero_epoch = good;
    zero_epoch[8..16].fill(0);
    assert_eq!(
        Header::decode(&zero_epoch, 1234),
        Err(WireError::Field("epoch"))
    );
    assert_eq!(
        Header::decode(&good[..63], 1234),
        Err(WireError::Length(63))
    );
    assert_eq!(
        Header::decode(&good, 1233),
        Err(WireError::PayloadLength {
            header: 1234,
            payload: 1233
        })
    );
    let close_with_len = Header {
        kind: Kind::Close,
        ..sample()
    };
    assert_eq!(
        Header::decode(&close_with_len.encode(), 1234),
        Err(WireError::Field("len"))
    );
}

#[test]
fn garbage_never_panics() {
    // A small deterministic generator (xorshift): every length up to two headers, random
    // bytes, and random bytes behind a valid magic and version.
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut accepted = 0;
    for round in 0..20_000 {
        let len = (next() % (2 * HEADER_LEN as u64 + 1)) as usize;
        let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 && len >= 8 {
            buf[..4].copy_from_slice(&MAGIC);
            buf[4] = VERSION;
            buf[5] = (next() % 4) as u8;
            buf[6] = (next() % 3) as u8;
        }
        let payload = (next() % 4096) as usize;
        if let Ok(h) = Header::decode(&buf, payload) {
            accepted += 1;
            assert_eq!(h.len as usize, payload);
            assert_eq!(Header::decode(&h.encode(), payload), Ok(h));
        }
    }
    // Random bytes essentially never form a valid header (the reserved bytes, the length).
    assert!(accepted < 10, "{accepted} random headers accepted");
}

/// A deterministic generator (xorshift).
fn rng(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A valid batch of `n` records with lengths up to `max` and some gaps.
fn batch(n: u64, max: u64, next: &mut impl FnMut() -> u64) -> (Header, Vec<u8>) {
    let mut w = BatchWriter::new(Vec::new());
    let mut seq = 100;
    for i in 0..n {
        let missed = if next() % 4 == 0 { next() % 3 } else { 0 };
        seq += missed;
        let len = (next() % (max + 1)) as usize;
        let payload: Vec<u8> = (0..len).map(|b| (b as u64 ^ i) as u8).collect();
        w.push(seq, missed, [i, !i], &payload).expect("push");
        seq += 1;
    }
    w.finish(DeliveryClass::SkipOnLag, 9, 50)
}

#[test]
fn batch_round_trip() {
    let mut next = rng(0x1234_5678_9abc_def1);
    for n in [1, 2, 3, 17, 600] {
        let (header, frame) = batch(n, 130, &mut next);
        let decoded = Header::decode(&header.encode(), frame.len()).expect("header");
        assert_eq!(decoded, header);
        assert_eq!(header.encode()[4], VERSION, "a batch is a version-2 sample");
        let parsed = Batch::parse(&decoded, &frame).expect("frame");
        assert_eq!(parsed.len() as u64, n);
        let mut prev = None;
        let mut total = BATCH_PREFIX_LEN;
        for (i, r) in parsed.records().enumerate() {
            let i = i as u64;
            assert_eq!(r.header.kind, Kind::Data);
            assert_eq!(r.header.meta, [i, !i]);
            assert_eq!((r.header.epoch, r.header.start), (9, 50));
            assert_eq!(r.header.len as usize, r.payload.len());
            assert!(r
                .payload
                .iter()
                .enumerate()
                .all(|(b, &v)| v == (b as u64 ^ i) as u8));
            match prev {
                None => assert_eq!(r.header.seq, header.seq),
                Some(p) => assert_eq!(r.header.seq, p + 1 + r.header.missed),
            }
            prev = Some(r.header.seq);
            total += RECORD_HEADER_LEN + r.payload.len();
            // Each record is a valid single-message header of its own.
            assert_eq!(
                Header::decode(&r.header.encode(), r.payload.len()),
                Ok(r.header)
            );
        }
        assert_eq!(parsed.records().count() as u64, n);
        assert_eq!(total, frame.len());
    }
}

#[test]
fn a_lone_record_goes_as_a_single_sample() {
    let mut w = BatchWriter::new(vec![0xEE; 3]);
    w.push(41, 2, [7, 8], b"only").expect("push");
    let (h, payload) = w
        .into_single(DeliveryClass::Gating, 3, 39)
        .expect("one record");
    assert_eq!(payload, b"only");
    assert_eq!(
        (h.kind, h.seq, h.missed, h.meta, h.len, h.start),
        (Kind::Data, 41, 2, [7, 8], 4, 39)
    );
    assert_eq!(
        h.encode()[4],
        VERSION_SINGLE,
        "what a version-1 bridge reads"
    );
    assert_eq!(Header::decode(&h.encode(), 4), Ok(h));
    let mut two = BatchWriter::new(Vec::new());
    two.push(1, 0, [0; 2], b"a").expect("push");
    two.push(2, 0, [0; 2], b"b").expect("push");
    assert!(two.into_single(DeliveryClass::Gating, 3, 0).is_err());
    let mut w = BatchWriter::new(Vec::new());
    w.push(5, 0, [0; 2], b"x").expect("push");
    assert_eq!(
        w.push(5, 0, [0; 2], b"y"),
        Err(WireError::Frame("record seqs do not increase"))
    );
    assert_eq!(w.len(), 1);
}

/// Overwrites the little-endian `u32` at `at`.
fn put32(frame: &mut [u8], at: usize, v: u32) {
    frame[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// `Batch::parse` with the header's length set to the frame's.
fn parse(mut header: Header, frame: &[u8]) -> Result<usize, WireError> {
    header.len = frame.len() as u32;
    Batch::parse(&header, frame).map(|b| b.records().count())
}

#[test]
fn hostile_batch_frames_are_errors_not_panics_or_allocations() {
    let mut w = BatchWriter::new(Vec::new());
    w.push(10, 0, [1, 1], &[0xA1; 40]).expect("push");
    w.push(11, 0, [2, 2], &[]).expect("push");
    w.push(15, 3, [3, 3], &[0xA3; 40]).expect("push");
    let (header, frame) = w.finish(DeliveryClass::Gating, 4, 2);
    assert_eq!(parse(header, &frame), Ok(3));
    let rec0 = BATCH_PREFIX_LEN;
    let refused = |f: &[u8], what: &'static str| {
        assert_eq!(parse(header, f), Err(WireError::Frame(what)));
    };
    // A count no frame could hold: a naive reader reserves room for it or walks past the
    // end.
    let mut f = frame.clone();
    put32(&mut f, 0, u32::MAX);
    refused(&f, "more records announced than the frame holds");
    // More records announced than there are (but few enough to fit the frame's size).
    let mut f = frame.clone();
    put32(&mut f, 0, 4);
    refused(&f, "a record header is cut short");
    // Fewer announced than there are: the rest is trailing garbage.
    let mut f = frame.clone();
    put32(&mut f, 0, 2);
    refused(&f, "bytes after the last record");
    put32(&mut f, 0, 0);
    refused(&f, "no records");
    // A record longer than what is left: a naive slice panics.
    for len in [u32::MAX, u32::MAX - 39, 1 << 31, frame.len() as u32] {
        let mut f = frame.clone();
        put32(&mut f, rec0, len);
        assert_eq!(
            parse(header, &f),
            Err(WireError::Frame("a record runs past the frame's end")),
            "record length {len}"
        );
    }
    let mut f = frame.clone();
    put32(&mut f, 4, 1);
    refused(&f, "reserved prefix word is not 0");
    let mut f = frame.clone();
    put32(&mut f, rec0 + 4, 1);
    refused(&f, "reserved record word is not 0");
    // Sequence numbers: the first must be the header's, the others increase (a naive
    // reader computing gaps as differences underflows).
    let mut f = frame.clone();
    f[rec0 + 8] ^= 1;
    refused(&f, "the first record's seq is not the header's");
    let second = rec0 + RECORD_HEADER_LEN + u32_at(&frame, rec0) as usize;
    let mut f = frame.clone();
    f[second + 8..second + 16].copy_from_slice(&header.seq.to_le_bytes());
    refused(&f, "record seqs do not increase");
    // Every truncation of a valid frame is refused (the header's length matching it).
    for cut in 0..frame.len() {
        assert!(
            parse(header, &frame[..cut]).is_err(),
            "a frame cut at {cut} of {} accepted",
            frame.len()
        );
    }
    // The header's length must match, and a frame is bounded.
    assert!(matches!(
        Batch::parse(&header, &frame[..frame.len() - 1]),
        Err(WireError::PayloadLength { header: h, payload: p })
            if h == header.len && p == frame.len() - 1
    ));
    let big = vec![0u8; MAX_BATCH_BYTES + 1];
    assert_eq!(parse(header, &big), Err(WireError::Field("len")));
    let single = Header::data(DeliveryClass::Gating, 1, 0, 0, [0; 2]);
    assert_eq!(parse(single, &frame), Err(WireError::Field("kind")));
}

#[test]
fn batch_header_fields_are_checked() {
    let mut next = rng(7);
    let (header, frame) = batch(2, 8, &mut next);
    let good = header.encode();
    let n = frame.len();
    assert_eq!(Header::decode(&good, n), Ok(header));
    let bad = |at: usize, v: u8| {
        let mut b = good;
        b[at] = v;
        Header::decode(&b, n)
    };
    assert_eq!(bad(4, VERSION_SINGLE), Err(WireError::Field("kind")));
    assert_eq!(bad(24, 1), Err(WireError::Field("missed")));
    assert_eq!(bad(40, 1), Err(WireError::Field("meta")));
    assert_eq!(bad(60, 1), Err(WireError::Field("code")));
    let with_len = |len: u32| {
        let mut b = good;
        b[56..60].copy_from_slice(&len.to_le_bytes());
        Header::decode(&b, len as usize)
    };
    let min = (BATCH_PREFIX_LEN + RECORD_HEADER_LEN) as u32;
    assert_eq!(with_len(min - 1), Err(WireError::Field("len")));
    assert_eq!(with_len(0), Err(WireError::Field("len")));
    assert_eq!(
        with_len(MAX_BATCH_BYTES as u32 + 1),
        Err(WireError::Field("len"))
    );
    assert!(with_len(min).is_ok());
}

#[test]
fn mutated_batch_frames_never_panic() {
    // Random bytes flipped in valid frames: whatever parses lies inside the frame, whole.
    let mut next = rng(0x0123_4567_89ab_cdef);
    let mut accepted = 0;
    for round in 0..3_000 {
        let (header, mut frame) = batch(1 + next() % 6, 24, &mut next);
        for _ in 0..=(round % 4) {
            let at = (next() % frame.len() as u64) as usize;
            frame[at] = next() as u8;
        }
        if round % 5 == 0 {
            let cut = (next() % (frame.len() as u64 + 1)) as usize;
            frame.truncate(cut);
        }
        let mut h = header;
        h.len = frame.len() as u32;
        if let Ok(batch) = Batch::parse(&h, &frame).map(|b| b.records().collect::<Vec<_>>()) {
            accepted += 1;
            let bytes: usize = batch
                .iter()
                .map(|r| RECORD_HEADER_LEN + r.payload.len())
                .sum();
            assert_eq!(BATCH_PREFIX_LEN + bytes, frame.len());
            assert!(batch.windows(2).all(|w| w[0].header.seq < w[1].header.seq));
        }
    }
    // Flips in payload bytes and metadata leave a valid frame; flips in lengths do not.
    assert!(accepted > 0, "no mutated frame parsed at all");
}
