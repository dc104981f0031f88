"""A TCP relay between a client and a kvcfs daemon that can lose one
answer: the request of the chosen type goes through, its answer (and
everything after it on that connection) never comes back, every relayed
connection is cut once the daemon had time to act on the request (so
the client cannot send it again on another one it keeps), and new
connections are refused until the test lets them through again. What a
client sees when the daemon crashes after its commit, or the network
drops the answer: it must send the request again, and the daemon may have
done it already. Or it can lose one request (lose_next_request): it
never reaches the daemon, and the same cut and refusal follow: what a
client sees when the network fails before the daemon got its request.

Frames are parsed only to find the request's type (kvcwire.HEADER: the
handshake's frames included); the bytes go through unchanged."""
import socket
import threading
import time

import kvcwire


class LossyRelay:
    def __init__(self, upstream):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.lose_type = None  # the type whose next answer is lost
        self.drop_request = False  # ... or whose next request is lost
        self.closed = False    # new connections refused (after a loss)
        self.lost = threading.Event()
        self.seen = {}         # request type -> how many went through
        self.socks = []
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def lose_next_answer(self, msg_type):
        self._lose_next(msg_type, request=False)

    def lose_next_request(self, msg_type):
        self._lose_next(msg_type, request=True)

    def _lose_next(self, msg_type, request):
        with self.lock:
            self.lose_type = msg_type
            self.drop_request = request
            self.lost.clear()

    def reopen(self):
        """New connections go through again."""
        with self.lock:
            self.closed = False

    def count(self, msg_type):
        with self.lock:
            return self.seen.get(msg_type, 0)

    def stop(self):
        self.stopping = True
        _close(self.listener)  # (shutdown wakes the accept)
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            _close(s)
        self.thread.join(10)

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                refuse = self.closed
            if refuse:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self.lock:
                self.socks += [client, server]
            muted = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, muted),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, muted),
                             daemon=True).start()

    def _requests(self, client, server, muted):
        try:
            while True:
                head = kvcwire.recv_exact(client, kvcwire.HEADER.size)
                _, _, msg_type, _, _, body_len, data_len = kvcwire.HEADER.unpack(head)
                rest = kvcwire.recv_exact(client, body_len + data_len) \
                    if body_len + data_len else b""
                with self.lock:
                    lose = msg_type == self.lose_type
                    drop = lose and self.drop_request
                    if lose:
                        self.lose_type = None
                        self.drop_request = False
                    self.seen[msg_type] = self.seen.get(msg_type, 0) + 1
                if lose:
                    muted.set()
                if not drop:
                    server.sendall(head + rest)
                if lose:
                    time.sleep(0.5)  # the daemon acts on it; the answer is dropped
                    with self.lock:
                        self.closed = True
                        socks, self.socks = self.socks, []
                    for sock in socks:
                        _close(sock)
                    self.lost.set()
                    return
        except (OSError, ConnectionError):
            _close(client)
            _close(server)

    def _answers(self, server, client, muted):
        try:
            while True:
                got = server.recv(65536)
                if not got:
                    break
                if not muted.is_set():
                    client.sendall(got)
        except OSError:
            pass
        _close(client)
        _close(server)


def _close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
