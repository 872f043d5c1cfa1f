"""The contract between a tool and the runtime: the tool base, calls, events, output limits."""
