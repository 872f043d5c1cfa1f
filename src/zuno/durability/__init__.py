"""What survives a crash: the store, recovery of calls, worker leases and fencing, session
options, telemetry.
"""
