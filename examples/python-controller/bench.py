"""Bench mode of the Python example controller (`cargo xtask bench apps` runs it).

Takes controller.py's command line plus `--bench-count N` and `--bench-window W`: attaches
once, sends N commands (ids `<command-id>-<i>`) to the edge app with at most W waiting for
their reply, acks every upstream message, and prints one JSON line
`{"event": "bench", "count": N, "seconds": S, "rttMs": [...]}`: the wall time of the whole
run and each command's round trip (send until its reply arrived), in milliseconds.
Commands refused NOT_CONNECTED or SESSION_ENDED are not sent again: a bench runs against a
connected node, and any refusal ends it with exit 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import grpc

from controller import Controller, emit, hub_pb2, message_pb2, run_attached
from controller import parse_args as controller_args


class Bench(Controller):
    """Sends `count` commands with at most `window` waiting; records the round trips."""

    def __init__(self, args: argparse.Namespace, count: int, window: int) -> None:
        super().__init__(args)
        self.resource = f"node/{args.node}/{args.resource}"
        self.content = args.content.encode()
        self.count = count
        self.window = max(1, window)
        self.next_index = 0
        self.sent_at: dict[str, float] = {}
        self.rtts_ms: list[float] = []

    def send_next(self) -> None:
        """Sends commands until `window` wait for a reply or all were sent."""
        while self.next_index < self.count and len(self.sent_at) < self.window:
            command_id = f"{self.command_id}-{self.next_index}"
            self.next_index += 1
            message = message_pb2.Message(
                header=message_pb2.Header(id=command_id, timestamp_ms=int(time.time() * 1000)),
                route=message_pb2.Route(
                    source=self.name, group=self.group, operation="update",
                    resource=self.resource,
                ),
                content=self.content,
            )
            self.sent_at[command_id] = time.perf_counter()
            self.send(self.node, message)

    def handle(self, frame: hub_pb2.HubFrame) -> int | None:
        kind = frame.WhichOneof("frame")
        if kind == "delivery_error":
            error = frame.delivery_error
            if error.message_id in self.sent_at:
                failure = hub_pb2.DeliveryFailure.Name(error.failure)
                print(f"bench.py: {error.message_id} refused: {failure}: {error.reason}",
                      file=sys.stderr, flush=True)
                return 2
            return None
        if kind != "message":
            return None
        message = frame.message.message
        if message.route.operation == "ack":
            return None
        self.ack(frame.message.node, message)
        started = self.sent_at.pop(message.header.parent_id, None)
        if message.route.operation == "response" and started is not None:
            self.rtts_ms.append((time.perf_counter() - started) * 1000)
            if len(self.rtts_ms) == self.count:
                return 0
            self.send_next()
        return None

    def run(self, call: Any) -> int:
        call.initial_metadata()
        started = time.perf_counter()
        self.send_next()
        code = 4
        try:
            for frame in call:
                result = self.handle(frame)
                if result is not None:
                    code = result
                    break
        except grpc.RpcError:
            pass
        if code == 0:
            emit("bench", count=self.count, seconds=time.perf_counter() - started,
                 rttMs=self.rtts_ms)
            self.detach(call)
        return code


def main() -> None:
    """Runs the bench and exits with its exit code."""
    bench_parser = argparse.ArgumentParser(add_help=False)
    bench_parser.add_argument("--bench-count", type=int, default=100)
    bench_parser.add_argument("--bench-window", type=int, default=1)
    bench, rest = bench_parser.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    args = controller_args()
    controller = Bench(args, bench.bench_count, bench.bench_window)
    run_attached(controller, args, args.timeout_seconds * 10)


if __name__ == "__main__":
    main()
