//! orchestrator
