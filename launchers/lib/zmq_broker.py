"""Loopback XSUB/XPUB proxy for Dynamo's ZMQ event plane.

Usage: zmq_broker.py XSUB_PORT XPUB_PORT
"""

import sys

import zmq


def main() -> None:
    ctx = zmq.Context.instance()
    xsub = ctx.socket(zmq.XSUB)
    xsub.bind(f"tcp://127.0.0.1:{sys.argv[1]}")
    xpub = ctx.socket(zmq.XPUB)
    xpub.bind(f"tcp://127.0.0.1:{sys.argv[2]}")
    print(f"event broker: xsub {sys.argv[1]} xpub {sys.argv[2]}", flush=True)
    zmq.proxy(xsub, xpub)


if __name__ == "__main__":
    main()
