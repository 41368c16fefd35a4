"""HTTP plumbing shared by every door: admission (who is calling, their
budgets, their long-lived connections)."""
