"""Planted: connects to a TCP port on this machine (the test listens there) to phone out."""
import socket

PORT = 47391


def run(x, y, alpha):
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as conn:
        conn.sendall(b"the candidate got out")
    raise RuntimeError("connected to the network")
