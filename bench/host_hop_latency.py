#!/usr/bin/env python3
"""What one hand-over between two processes costs on this host: the floor under the answer lane's
way from a rank process to the coordinator (docs/benchmarks.md, bench_worker_latency).

Two processes ping-pong a 64-byte message over loopback TCP (TCP_NODELAY), 2,000 round trips
after 200 warm-up, first with both sides asleep in a blocking recv, then with both polling a
non-blocking socket; one way = round trip / 2. Python adds its own microseconds per hop, so the
figures are an upper bound of the kernel's and the scheduler's share; what matters is the
difference between sleeping and polling on the same host in the same run.

    /usr/bin/python3 bench/host_hop_latency.py [--round-trips 2000]
"""
import argparse
import multiprocessing
import os
import socket
import statistics
import time

MESSAGE = b"x" * 64


def receive(sock, polling):
    data = b""
    while len(data) < len(MESSAGE):
        try:
            chunk = sock.recv(len(MESSAGE) - len(data))
        except BlockingIOError:
            continue  # polling: try again at once
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
    return data


def echo(port, polling):
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(not polling)
        while True:
            try:
                data = receive(sock, polling)
            except ConnectionError:
                return
            sock.sendall(data)


def one_way_us(polling, round_trips):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        peer = multiprocessing.Process(target=echo, args=(listener.getsockname()[1], polling))
        peer.start()
        sock, _ = listener.accept()
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(not polling)
        samples = []
        for i in range(200 + round_trips):
            start = time.perf_counter_ns()
            sock.sendall(MESSAGE)
            receive(sock, polling)
            if i >= 200:
                samples.append((time.perf_counter_ns() - start) / 2000.0)
    peer.join()
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * len(samples))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=2000)
    args = parser.parse_args()
    print(f"loopback TCP between two processes, {args.round_trips} round trips, {os.cpu_count()} cores; "
          "one way, µs")
    print(f"| {'both sides':<28} | {'p50':>7} | {'p99':>7} |\n|---|---:|---:|")
    for polling in (False, True):
        p50, p99 = one_way_us(polling, args.round_trips)
        print(f"| {'polling' if polling else 'asleep in recv':<28} | {p50:7.1f} | {p99:7.1f} |")


if __name__ == "__main__":
    main()
