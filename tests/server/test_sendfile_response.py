"""A response with file regions goes out as one sequence on the socket
(sendfile.send_response): its bytes and regions in order, whole, after whatever the
transport held, when the peer reads slowly enough that every send waits for room, and
through the transport (regions copied) where there is no socket."""

import asyncio
import os

from kqlite.protocol import FileRegion
from kqlite.server.sendfile import send_response

REGION = 3 << 20      # past any loopback socket buffer: sendfile and send both wait


def _file(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def test_bytes_and_regions_arrive_in_order_after_what_the_transport_held(tmp_path):
    first, second = os.urandom(REGION), os.urandom(REGION)
    fds = [_file(tmp_path, "a", b"x" * 100 + first), _file(tmp_path, "b", second)]
    chunks = [b"head", FileRegion(fds[0], 100, REGION), b"m" * (1 << 20),
              FileRegion(fds[1], 0, REGION), b"tail"]
    expected = b"before" + b"head" + first + b"m" * (1 << 20) + second + b"tail" + b"after"

    async def main():
        got = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            writer.write(b"before")
            sent = await send_response(writer, chunks)
            writer.write(b"after")
            await writer.drain()
            writer.close()
            got.set_result(sent)
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.2)           # the sender meets a full socket first
        data = await reader.read()
        writer.close()
        server.close()
        return data, await got
    try:
        data, sent = asyncio.run(main())
    finally:
        for fd in fds:
            os.close(fd)
    assert data == expected
    assert sent == len(expected) - len(b"before") - len(b"after")


class _Transport:
    def set_write_buffer_limits(self, high=None, low=None):
        self.high = high


class _SocketlessWriter:
    """A stream writer whose transport has no socket (as a test double or an
    in-memory transport would be)."""

    def __init__(self):
        self.transport = _Transport()
        self.out = bytearray()

    def get_extra_info(self, name):
        return None

    def write(self, data):
        self.out += data

    async def drain(self):
        return None


def test_without_a_socket_the_regions_are_copied_through_the_transport(tmp_path):
    body = os.urandom(1 << 19)
    fd = _file(tmp_path, "a", body)
    writer = _SocketlessWriter()
    try:
        sent = asyncio.run(send_response(writer, [b"h", FileRegion(fd, 10, 1000), b"t"]))
    finally:
        os.close(fd)
    assert bytes(writer.out) == b"h" + body[10:1010] + b"t"
    assert sent == 1002
