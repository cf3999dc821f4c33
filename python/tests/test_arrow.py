"""Arrow: a RecordBatch written with the IPC stream writer straight into a claimed slot, read
back zero-copy in another process."""

import pytest

import shmring
import workers

pa = pytest.importorskip("pyarrow")


def test_record_batch_in_place(spawn, child, name):
    batch = pa.record_batch({"x": pa.array(range(10_000), pa.int64()),
                             "s": pa.array([str(i) for i in range(10_000)])})
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    size = sink.size()
    with shmring.Ring.create(name, slots=2, slot_size=size + 4096, pin_only=True) as ring:
        ready, out = spawn.Event(), spawn.Queue()
        with child(workers.arrow_reader, name, ready, out) as proc:
            p = workers.producer_when_ready(ring, ready)
            claim = p.claim(size)
            with claim as buf:
                target = pa.py_buffer(buf)
                with pa.FixedSizeBufferWriter(target) as stream:
                    with pa.ipc.new_stream(stream, batch.schema) as w:
                        w.write_batch(batch)
                    # The writer is hard-bounded: a byte past the reservation raises.
                    with pytest.raises(Exception):
                        stream.write(b"overflow")
                del target, stream, w  # every Arrow view of the slot goes before publishing
            rows, total, zero_copy, pid = out.get(timeout=30)
            proc.join(30)
            assert (rows, total) == (10_000, sum(range(10_000)))
            assert zero_copy, "the reader's column does not point into its mapping"
