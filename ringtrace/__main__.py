from ringtrace.cli import run

run()
