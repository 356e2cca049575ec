"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and its state machine."""
