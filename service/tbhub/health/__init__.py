"""Run health (issue 17): the monitor that follows active runs' event files on the leader,
its detectors and per-project rules, the incidents they raise, and (notify/) where the
incidents are sent."""
