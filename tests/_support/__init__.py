"""What the tests share, and nothing else: no test module imports another test module.

* ``samples`` — the runtime's real files by name; ``scope_stats`` — build lines and read them back;
  ``collector`` — programs as the runtime's collector writes them.
* ``cli`` — the answer of one in-process command; ``agent`` — a real ``ringtrace watch`` process;
  ``writer`` / ``writer_process`` — a real writer process and ``wait_for`` (a condition with a deadline).
* ``sinks`` — the one collecting test sink (and a stepping one); ``events`` — the sink events of real files;
  ``prometheus``, ``otlp`` (the OTLP sink tests' helpers), ``otlp_view``, ``otlp_receiver`` (a real
  OTLP gRPC/HTTP receiver), ``scopes``.
* ``convert`` — run the ``convert`` command; ``reopen_agent`` — the service with a reopening sink;
  ``app`` — the live App in a thread of its own with an injected clock; ``healthz`` — a big host log and
  a ``/healthz`` prober; ``golden`` — every exporter's output of a golden case, made deterministic.
* ``perfetto_ui`` — the real Perfetto UI and its trace processor in headless Chromium.
* ``ports``, ``require`` (fail in CI, skip on a laptop), ``tmpfs``.
"""
