"""Transfer of a file region to an asyncio stream: zero-copy on a plain socket, copied
through the TLS layer on a TLS one.

``loop.sendfile`` is not implemented by uvloop, and asyncio's fallback copies
through Python. Both loops let us register a duplicate of the socket's
descriptor for writability, so the kernel's ``sendfile(2)`` runs on the same
socket once the transport's own buffer is empty.

A response with regions (:func:`send_response`) is sent as one sequence on that
duplicate: the transport is drained once, then the bytes between regions go out with
``send(MSG_MORE)`` (they leave with the region after them, not as a small segment of
their own) and each region with ``sendfile(2)``. A Fetch over 16 partitions is then
one descriptor and one drain, not one of each per partition plus a pass through the
transport for every partition's header bytes.

TLS rules that out: the bytes must be encrypted by the TLS layer, in this process.
:func:`copy_region` reads the region in chunks of ``COPY_CHUNK`` bytes in a storage
thread (the event loop never waits on the disk) and writes each through the transport,
waiting for the transport to drain below ``COPY_CHUNK`` before reading the next, so a
connection holds at most about two chunks whatever the size of the fetch.
"""

import asyncio
import os
import socket

from ..protocol import FileRegion

__all__ = ["send_response", "copy_region", "COPY_CHUNK"]

COPY_CHUNK = 1 << 18


async def send_response(writer, chunks):
    """Send ``chunks`` (bytes and FileRegions, in order) on a plain socket as one
    sequence past the transport (its buffer drained first); returns the bytes sent.
    Without a socket (a transport of another kind) each chunk goes through the
    transport, the regions copied."""
    # With a zero high-water mark drain() returns only once the transport holds
    # nothing, so our bytes cannot overtake data it has buffered.
    writer.transport.set_write_buffer_limits(high=0)
    await writer.drain()
    raw = writer.get_extra_info("socket")
    if raw is None:
        sent = 0
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                sent += await _copy(writer, chunk.fd, chunk.offset, chunk.length)
            else:
                writer.write(chunk)
                sent += len(chunk)
        await writer.drain()
        return sent
    loop = asyncio.get_running_loop()
    # A socket object of its own on a duplicate descriptor (the same open socket):
    # the transport keeps its registration and its object.
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    sock.setblocking(False)     # as the transport's socket already is (one file status)
    out = sock.fileno()
    sent = 0
    try:
        # MSG_MORE holds bytes back until more follow: never on the last that carries any.
        last = max((i for i, c in enumerate(chunks)
                    if (c.length if isinstance(c, FileRegion) else len(c))), default=-1)
        for i, chunk in enumerate(chunks):
            if isinstance(chunk, FileRegion):
                sent += await _sendfile(loop, out, chunk.fd, chunk.offset, chunk.length)
            else:
                sent += await _send_bytes(loop, sock, chunk,
                                          socket.MSG_MORE if i < last else 0)
    finally:
        sock.close()
    return sent


async def _sendfile(loop, out, fd, offset, count):
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(out, fd, offset + sent, count - sent)
        except BlockingIOError:
            await _writable(loop, out)
            continue
        if n == 0:
            raise ConnectionError(f"file region ended {count - sent} bytes early")
        sent += n
    return sent


async def _send_bytes(loop, sock, data, flags):
    view = memoryview(data)
    sent = 0
    while sent < len(view):
        try:
            sent += sock.send(view[sent:], flags)
        except BlockingIOError:
            await _writable(loop, sock.fileno())
    return sent


async def _writable(loop, fd):
    ready = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def _copy(writer, fd, offset, count):
    """Transports without a socket get the bytes copied (reads of the page cache only:
    a region is always of bytes just written or read)."""
    sent = 0
    while sent < count:
        chunk = os.pread(fd, min(COPY_CHUNK, count - sent), offset + sent)
        if not chunk:
            raise ConnectionError(f"file region ended {count - sent} bytes early")
        writer.write(chunk)
        await writer.drain()
        sent += len(chunk)
    return sent


async def copy_region(writer, fd, offset, count, run):
    """Send ``count`` bytes of ``fd`` from ``offset`` through the transport (TLS), each
    chunk read by ``run(os.pread, ...)`` in a storage thread; returns the bytes sent."""
    writer.transport.set_write_buffer_limits(high=COPY_CHUNK)
    sent = 0
    while sent < count:
        chunk = await run(os.pread, fd, min(COPY_CHUNK, count - sent), offset + sent)
        if not chunk:
            raise ConnectionError(f"file region ended {count - sent} bytes early")
        writer.write(chunk)
        await writer.drain()
        sent += len(chunk)
    return sent
