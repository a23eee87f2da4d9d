"""What each team is entitled to: quota and flavor edits by site admins (`quotas`, `flavors`),
the fair shares the last cycle planned with (`fair_shares`) and the time-based share balances
every cycle advances (`share_balance`)."""
