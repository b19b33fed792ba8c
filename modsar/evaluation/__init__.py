"""Evaluation: exact ranking metrics over a full item ranking (`ranking`), and H-step rollouts measured
against a user's held-out future (`rollouts`, `modsar generate`)."""
