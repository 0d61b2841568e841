"""A loopback OTLP/HTTP profiles receiver for the tests: each request to
/v1development/profiles is decoded with the official opentelemetry-proto package and told on
stdout as one JSON line (its resources' attributes, and each profile's sample type, samples,
values and the functions its stacks name); the first line says the port it listens on.
With --refuse, every request is answered 400 with a reason, as a server that cannot read it.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

REFUSE = "--refuse" in sys.argv


def any_value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def told(request):
    dictionary = request.dictionary
    strings = dictionary.string_table

    def functions_of(stack_index):
        names = []
        for location_index in dictionary.stack_table[stack_index].location_indices:
            for line in dictionary.location_table[location_index].lines:
                function = dictionary.function_table[line.function_index]
                names.append(strings[function.name_strindex])
        return names

    resources = []
    for resource_profiles in request.resource_profiles:
        attributes = {
            attribute.key: any_value(attribute.value)
            for attribute in resource_profiles.resource.attributes
        }
        profiles = []
        for scope_profiles in resource_profiles.scope_profiles:
            for profile in scope_profiles.profiles:
                sample_type = profile.sample_type
                functions = set()
                sample_attributes = set()
                for sample in profile.samples:
                    functions.update(functions_of(sample.stack_index))
                    for index in sample.attribute_indices:
                        attribute = dictionary.attribute_table[index]
                        key = strings[attribute.key_strindex]
                        sample_attributes.add(f"{key}={any_value(attribute.value)}")
                profiles.append(
                    {
                        "scope": scope_profiles.scope.name,
                        "type": strings[sample_type.type_strindex],
                        "unit": strings[sample_type.unit_strindex],
                        "samples": len(profile.samples),
                        "total": sum(sum(sample.values) for sample in profile.samples),
                        "time_unix_nano": profile.time_unix_nano,
                        "duration_nano": profile.duration_nano,
                        "functions": sorted(functions),
                        "attributes": sorted(sample_attributes),
                    }
                )
        resources.append({"attributes": attributes, "profiles": profiles})
    return resources


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        line = {
            "path": self.path,
            "content_type": self.headers.get("Content-Type"),
            "authorization": self.headers.get("Authorization"),
        }
        try:
            request = profiles_service_pb2.ExportProfilesServiceRequest.FromString(body)
            line["resources"] = told(request)
        except Exception as error:  # a request that does not decode is the test's failure
            line["error"] = repr(error)
        print(json.dumps(line), flush=True)
        if REFUSE:
            self.send_response(400)
            reason = b"profiles are not accepted here"
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(reason)))
            self.end_headers()
            self.wfile.write(reason)
            return
        answer = profiles_service_pb2.ExportProfilesServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Receiver)
print(json.dumps({"port": server.server_address[1]}), flush=True)
server.serve_forever()
