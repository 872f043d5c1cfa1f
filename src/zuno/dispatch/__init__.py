"""The dispatcher: arguments, pre-flight, scheduling, dispatch and landing of results."""
