"""Notifications: incidents to webhooks, Slack-format webhooks and email, through an outbox
in the database (outbox.py) that a worker on the leader sends from, with every outbound
address checked (ssrf.py)."""
