"""A Python client of the distsample gateway (proto/distsample.proto).

Standard library plus Debian's python3-protobuf: run it with /usr/bin/python3 (the pyenv python3
on PATH does not see Debian's packages). The message classes, distsample_pb2.py, are generated at
build time into <build>/python (target ds_proto_python); put that directory on PYTHONPATH.

    client = Client("127.0.0.1:7700")            # or "unix:/path/to.sock"; secret="..." if set
    slot = client.register(temperature=0.8, seed=1, history=[12, 40])
    reply = client.verify([slot], [position], [[anchor, d1, d2]])
    reply.predict, reply.accept_length

Requests can be pipelined: send() many, then receive() their replies in the same order.
"""

import socket
import struct

import distsample_pb2 as wire

PROTOCOL_VERSION = 1
_HEADER = struct.Struct(">I")


class GatewayError(Exception):
    """An error reply: code (a wire.Error.Code name), field and message."""

    def __init__(self, error):
        self.code = wire.Error.Code.Name(error.code)
        self.field = error.field
        self.message = error.message
        super().__init__(f"{self.code} {self.field}: {self.message}")


class Client:
    def __init__(self, address, secret=None, max_frame_bytes=16 << 20):
        if address.startswith("unix:"):
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.connect(address[len("unix:"):])
        else:
            host, _, port = address.rpartition(":")
            self._sock = socket.create_connection((host, int(port)))
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._next_id = 1
        if secret:
            request = wire.Request()
            request.auth.secret = secret.encode()
            self.call(request)

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- pipelining ---------------------------------------------------------------------------
    def send(self, request):
        """Stamps the version and the next request id on `request`, sends it, returns the id."""
        request.version = PROTOCOL_VERSION
        request.request_id = self._next_id
        self._next_id += 1
        payload = request.SerializeToString()
        self._sock.sendall(_HEADER.pack(len(payload)) + payload)
        return request.request_id

    def receive(self):
        """The next reply (a wire.Reply), in the order the requests were sent."""
        while True:
            if len(self._buffer) >= _HEADER.size:
                (length,) = _HEADER.unpack_from(self._buffer)
                if length > self._max_frame_bytes:
                    raise ConnectionError(f"reply frame of {length} bytes exceeds {self._max_frame_bytes}")
                if len(self._buffer) >= _HEADER.size + length:
                    payload = bytes(self._buffer[_HEADER.size:_HEADER.size + length])
                    del self._buffer[:_HEADER.size + length]
                    reply = wire.Reply()
                    reply.ParseFromString(payload)
                    return reply
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            self._buffer += chunk

    def call(self, request):
        """send + receive; an error reply raises GatewayError."""
        self.send(request)
        reply = self.receive()
        if reply.HasField("error"):
            raise GatewayError(reply.error)
        return reply

    # --- operations ---------------------------------------------------------------------------
    def register(self, slot=0, history=(), scheduler_request_id=0, **params):
        """Registers a request (slot 0: the server picks one) and returns its slot. `params` are
        SamplingParams fields: temperature, top_k, top_p, min_p, seed, penalties, logit_bias."""
        request = wire.Request()
        reg = getattr(request, "register")
        reg.slot = slot
        reg.scheduler_request_id = scheduler_request_id
        reg.history.extend(history)
        for key, value in params.items():
            if key == "logit_bias":
                for token, bias in value.items():
                    reg.params.logit_bias[token] = bias
            else:
                setattr(reg.params, key, value)
        return self.call(request).registered.slot

    def release(self, slot):
        request = wire.Request()
        request.release.slot = slot
        self.call(request)

    @staticmethod
    def _fill_step(step, slots, positions, candidates=None, logits=None, bitmask=None, thresholds=None):
        step.slots.extend(slots)
        step.positions.extend(positions)
        if candidates is not None:
            step.tokens_per_req = len(candidates[0])
            for chain in candidates:
                step.candidates.extend(chain)
        if logits is not None:
            step.logits.extend(logits)
        if bitmask is not None:
            step.bitmask.extend(bitmask)
        if thresholds is not None:
            step.threshold_single, step.threshold_acc = thresholds

    def sample(self, slots, positions, logits=None, bitmask=None):
        """One token per request; logits (flat bs * V fp32) or, when None, the server's model."""
        request = wire.Request()
        self._fill_step(request.sample_step, slots, positions, logits=logits, bitmask=bitmask)
        return self.call(request).step

    def verify(self, slots, positions, candidates, logits=None, bitmask=None, thresholds=None):
        """Verifies draft chains: candidates[b] = [anchor, draft 1, ..., draft N-1]."""
        request = wire.Request()
        self._fill_step(request.verify_step, slots, positions, candidates, logits, bitmask, thresholds)
        return self.call(request).step

    def health(self):
        request = wire.Request()
        request.health.SetInParent()
        return self.call(request).health

    def stats(self):
        request = wire.Request()
        request.stats.SetInParent()
        return self.call(request).stats
