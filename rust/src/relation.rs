//! Relation and type descriptions, as the stream's Relation ('R') and Type ('Y') messages
//! give them.
//!
//! pgoutput sends a relation's description before the first change to it in a session,
//! again after DDL or a publication change invalidates it, and once per streamed
//! transaction (its schema might differ from the one in force outside it). Columns are
//! listed in `pg_attribute.attnum` order, restricted to the published column list; tuples
//! carry their values in exactly this order.

use crate::protocol::{RelationMsg, TypeMsg};

/// Column flag bit: the column belongs to the replica identity.
pub const FLAG_IDENTITY: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    /// Part of the replica identity (every column under REPLICA IDENTITY FULL).
    pub is_key: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    /// The schema; pgoutput sends an empty namespace for pg_catalog.
    pub namespace: String,
    pub name: String,
    /// `schema.table`, the key of change tables and events.
    pub qualified_name: String,
    /// relreplident: 'd' default, 'n' nothing, 'f' full, 'i' index.
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

impl Relation {
    pub fn from_message(msg: &RelationMsg<'_>) -> Self {
        let namespace = if msg.namespace.is_empty() {
            "pg_catalog"
        } else {
            msg.namespace
        };
        Self {
            oid: msg.oid,
            namespace: namespace.to_owned(),
            name: msg.name.to_owned(),
            qualified_name: format!("{namespace}.{}", msg.name),
            replica_identity: msg.replica_identity,
            columns: msg
                .columns
                .iter()
                .map(|c| Column {
                    name: c.name.to_owned(),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                    is_key: c.flags & FLAG_IDENTITY != 0,
                })
                .collect(),
        }
    }
}

/// A user-defined type named by a Type message (built-in types are never described).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
}

impl TypeInfo {
    pub fn from_message(msg: &TypeMsg<'_>) -> Self {
        let namespace = if msg.namespace.is_empty() {
            "pg_catalog"
        } else {
            msg.namespace
        };
        Self {
            oid: msg.oid,
            namespace: namespace.to_owned(),
            name: msg.name.to_owned(),
        }
    }
}
