"""Generated protobuf modules (scripts/gen-proto.sh); do not edit."""
