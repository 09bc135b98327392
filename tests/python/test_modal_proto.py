"""Garrison's hand-written Modal protos match the schema of the pinned
`modal` client: every message, field (name, number, repeated or not), enum
value and RPC in crates/modal/proto/*.proto is checked against the
descriptors the wheel ships in modal_proto/*_pb2.py. Garrison's files may
leave things out (proto3 skips unknown fields); what they have must be
Modal's.
"""

import re
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor
from modal_proto import api_pb2, task_command_router_pb2

PROTO_DIR = Path(__file__).resolve().parents[2] / "crates" / "modal" / "proto"
FILES = {
    "modal_api.proto": api_pb2.DESCRIPTOR,
    "task_command_router.proto": task_command_router_pb2.DESCRIPTOR,
}

TOKEN = re.compile(r"//[^\n]*|[{};=<>,()]|[A-Za-z_][\w.]*|\d+|\"[^\"]*\"")


def tokens(text):
    return [t for t in TOKEN.findall(text) if not t.startswith("//")]


def parse(text):
    """The messages (dotted names), enums and services of a proto file."""
    toks = tokens(text)
    messages, enums, services = {}, {}, {}
    i = 0

    def block(i, scope, kind, name):
        full = f"{scope}{name}"
        assert toks[i] == "{", (full, toks[i])
        i += 1
        fields, values, rpcs = {}, {}, {}
        while toks[i] != "}":
            t = toks[i]
            if t in ("message", "enum"):
                i = block(i + 2, full + ".", t, toks[i + 1])
            elif t == "oneof":
                i += 3  # oneof NAME {
                continue
            elif t == "rpc":
                # rpc Name ( Req ) returns ( stream? Resp ) ;
                name_, req = toks[i + 1], toks[i + 3]
                j = i + 6
                stream = toks[j + 1] == "stream"
                resp = toks[j + 2] if stream else toks[j + 1]
                rpcs[name_] = (req, resp, stream)
                i = toks.index(";", i) + 1
            elif kind == "enum":
                values[t] = int(toks[i + 2])
                i += 4
            else:
                label = ""
                if t in ("repeated", "optional"):
                    label, i = t, i + 1
                if toks[i] == "map":
                    # map < K , V > name = N ;
                    name_, number = toks[i + 6], int(toks[i + 8])
                    fields[name_] = (number, "repeated")
                    i += 10
                else:
                    name_, number = toks[i + 1], int(toks[i + 3])
                    fields[name_] = (number, label)
                    i += 5
        if kind == "message":
            messages[full] = fields
        elif kind == "enum":
            enums[full] = values
        else:
            services[full] = rpcs
        return i + 1

    while i < len(toks):
        if toks[i] in ("message", "enum", "service"):
            i = block(i + 2, "", toks[i], toks[i + 1])
        elif toks[i] in ("syntax", "package", "import"):
            i = toks.index(";", i) + 1
        else:
            i += 1
    return messages, enums, services


def find(descriptor, dotted, kind):
    parts = dotted.split(".")
    table = descriptor.enum_types_by_name if kind == "enum" and len(parts) == 1 else descriptor.message_types_by_name
    found = table[parts[0]]
    for k, part in enumerate(parts[1:]):
        last = k == len(parts) - 2
        found = (found.enum_types_by_name if kind == "enum" and last else found.nested_types_by_name)[part]
    return found


def test_every_field_enum_value_and_rpc_is_modals():
    checked = 0
    for file, descriptor in FILES.items():
        messages, enums, services = parse((PROTO_DIR / file).read_text())
        assert messages, file
        for name, fields in messages.items():
            theirs = find(descriptor, name, "message")
            for field, (number, label) in fields.items():
                assert field in theirs.fields_by_name, f"{file}: {name}.{field} is not Modal's"
                real = theirs.fields_by_name[field]
                assert real.number == number, f"{file}: {name}.{field} = {number}, Modal's is {real.number}"
                repeated = real.is_repeated if hasattr(real, "is_repeated") else real.label == FieldDescriptor.LABEL_REPEATED
                assert repeated == (label == "repeated"), f"{file}: {name}.{field} repeated?"
                checked += 1
        for name, values in enums.items():
            theirs = find(descriptor, name, "enum")
            for value, number in values.items():
                assert theirs.values_by_name[value].number == number, f"{file}: {name}.{value}"
                checked += 1
        for name, rpcs in services.items():
            theirs = descriptor.services_by_name[name]
            for rpc, (req, resp, stream) in rpcs.items():
                method = theirs.methods_by_name[rpc]
                assert method.input_type.name == req.split(".")[-1], f"{file}: {rpc} request"
                assert method.output_type.name == resp.split(".")[-1], f"{file}: {rpc} response"
                assert method.server_streaming == stream, f"{file}: {rpc} streaming"
                checked += 1
    assert checked > 150


def test_the_checker_catches_a_wrong_number():
    messages, _, _ = parse("message CommandRouterAccess { string jwt = 2; }")
    real = find(api_pb2.DESCRIPTOR, "CommandRouterAccess", "message")
    assert real.fields_by_name["jwt"].number != messages["CommandRouterAccess"]["jwt"][0]
