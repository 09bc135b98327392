//! Read-only, content-addressed root filesystems shared by all sessions.
