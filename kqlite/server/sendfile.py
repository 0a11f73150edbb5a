"""Transfer of a file region to an asyncio stream: zero-copy on a plain socket, copied
through the TLS layer on a TLS one.

``loop.sendfile`` is not implemented by uvloop, and asyncio's fallback copies
through Python. Both loops let us register a duplicate of the socket's
descriptor for writability, so the kernel's ``sendfile(2)`` runs on the same
socket once the transport's own buffer is empty.

TLS rules that out: the bytes must be encrypted by the TLS layer, in this process.
:func:`copy_region` reads the region in chunks of ``COPY_CHUNK`` bytes in a storage
thread (the event loop never waits on the disk) and writes each through the transport,
waiting for the transport to drain below ``COPY_CHUNK`` before reading the next, so a
connection holds at most about two chunks whatever the size of the fetch.
"""

import asyncio
import os

__all__ = ["send_region", "copy_region", "COPY_CHUNK"]

COPY_CHUNK = 1 << 18


async def send_region(writer, fd, offset, count):
    """Send ``count`` bytes of ``fd`` from ``offset``; returns the bytes sent."""
    # With a zero high-water mark drain() returns only once the transport holds
    # nothing, so our bytes cannot overtake data it has buffered.
    writer.transport.set_write_buffer_limits(high=0)
    await writer.drain()
    sock = writer.get_extra_info("socket")
    if sock is None:
        return await _copy(writer, fd, offset, count)
    loop = asyncio.get_running_loop()
    out = os.dup(sock.fileno())
    sent = 0
    try:
        while sent < count:
            try:
                n = os.sendfile(out, fd, offset + sent, count - sent)
            except BlockingIOError:
                await _writable(loop, out)
                continue
            if n == 0:
                raise ConnectionError(f"file region ended {count - sent} bytes early")
            sent += n
    finally:
        os.close(out)
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
