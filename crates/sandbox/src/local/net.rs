//! Per-sandbox network namespaces: pasta for egress, nftables for the rules.
