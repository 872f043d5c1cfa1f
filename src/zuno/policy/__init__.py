"""What a call may do: permissions and modes, shell rules, hooks, search fences, budgets."""
