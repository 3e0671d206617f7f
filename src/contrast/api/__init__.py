"""Wire formats of the Coordinator's APIs: protobuf messages generated from the `.proto` files here.

Regenerate with `bash scripts/protoc.sh` after changing a `.proto` file; a test checks that the
generated modules match. Services are bound by hand in `contrast.api.services` (typed), so only
the message modules are generated.
"""
