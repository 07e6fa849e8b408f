"""The Rust PostgreSQL client."""
