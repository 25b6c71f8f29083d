"""Calls wasi:sockets directly (bindings of wit/world.wit) and reports each step's answer."""

from componentize_py_types import Err
from stockade import tool
from wit_world.imports import instance_network, ip_name_lookup, network, tcp_create_socket


def _error(exc):
    value = exc.value
    return getattr(value, "name", None) or repr(value)


@tool("sockets.connect")
def connect(input):
    net = instance_network.instance_network()
    try:
        sock = tcp_create_socket.create_tcp_socket(network.IpAddressFamily.IPV4)
    except Err as exc:
        return {"create": _error(exc)}
    address = network.IpSocketAddress_Ipv4(
        network.Ipv4SocketAddress(port=input["port"], address=(127, 0, 0, 1))
    )
    try:
        sock.start_connect(net, address)
    except Err as exc:
        return {"start_connect": _error(exc)}
    sock.subscribe().block()
    try:
        sock.finish_connect()
    except Err as exc:
        return {"finish_connect": _error(exc)}
    return {"connected": True}


@tool("sockets.resolve")
def resolve(input):
    net = instance_network.instance_network()
    try:
        stream = ip_name_lookup.resolve_addresses(net, input["name"])
        stream.subscribe().block()
        return {"address": repr(stream.resolve_next_address())}
    except Err as exc:
        return {"resolve": _error(exc)}
