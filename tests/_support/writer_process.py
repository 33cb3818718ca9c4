"""A real writer process for the tailing tests, driven over stdin one JSON command a line.

Each command is answered with ``ok`` on stdout once it is done (the file operation has
returned), so a test knows exactly what is on disk without sleeping.  Commands:

  {"op": "open", "path": P, "mode": "w"|"a"}   open (``w`` truncates in place, like fopen("w"))
  {"op": "write", "hex": H}                     write bytes (one write call) and flush
  {"op": "close"}
  {"op": "rename", "src": A, "dst": B}          os.replace
  {"op": "delete", "path": P}
  {"op": "mkdir", "path": P}
  {"op": "copy", "src": A, "dst": B}            write a whole file in one write, like the runtime
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO


def main() -> None:
    fh: IO[bytes] | None = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "open":
            fh = open(cmd["path"], cmd["mode"] + "b")  # noqa: SIM115 - kept open across commands
        elif op == "write":
            assert fh is not None
            fh.write(bytes.fromhex(cmd["hex"]))
            fh.flush()
        elif op == "close":
            assert fh is not None
            fh.close()
            fh = None
        elif op == "rename":
            os.replace(cmd["src"], cmd["dst"])
        elif op == "delete":
            os.unlink(cmd["path"])
        elif op == "mkdir":
            os.makedirs(cmd["path"], exist_ok=True)
        elif op == "copy":
            with open(cmd["src"], "rb") as src:
                data = src.read()
            with open(cmd["dst"], "wb") as dst:
                dst.write(data)
        sys.stdout.write("ok\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
