"""Servers and the machine: launching and stopping a server process, the embedded vLLM, what the machine
and its GPUs are (and their telemetry), and scheduler autogroups between client and server.
"""
