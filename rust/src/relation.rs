//! Relation and type descriptions, as the stream's Relation ('R') and Type ('Y') messages
//! give them.
//!
//! pgoutput sends a relation's description before the first change to it in a session,
//! again after DDL or a publication change invalidates it, and once per streamed
//! transaction (its schema might differ from the one in force outside it). Columns are
//! listed in `pg_attribute.attnum` order, restricted to the published column list; tuples
//! carry their values in exactly this order.

use std::collections::HashMap;
use std::sync::Arc;

use crate::protocol::{RelationMsg, TypeMsg};
use crate::values::Scalar;

/// Column flag bit: the column belongs to the replica identity.
pub const FLAG_IDENTITY: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
    /// The built-in type whose values the column holds: `type_oid` itself, or for a
    /// domain the base type a Type message named (see [`base_type_oid`]).
    pub base_type_oid: u32,
    /// The column's `atttypmod` as sent.
    pub type_modifier: i32,
    /// The modifier that applies to the base type's values: `type_modifier`, or for a
    /// domain column (whose own `atttypmod` is -1) the domain's `typtypmod` from the
    /// catalog, so a domain over `numeric(10,2)` still maps to decimal128(10, 2).
    pub base_type_modifier: i32,
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
    /// `types`: the Type messages seen so far, to resolve domains to their base types;
    /// `catalog`: what the server's catalog says about user types (takes precedence).
    pub fn from_message(
        msg: &RelationMsg<'_>,
        types: &HashMap<u32, Arc<TypeInfo>>,
        catalog: &TypeCatalog,
    ) -> Self {
        let columns = msg
            .columns
            .iter()
            .map(|c| {
                let base = catalog
                    .get(&c.type_oid)
                    .copied()
                    .unwrap_or_else(|| BaseType {
                        oid: types
                            .get(&c.type_oid)
                            .and_then(|t| base_type_oid(t))
                            .unwrap_or(c.type_oid),
                        type_modifier: -1,
                    });
                Column {
                    name: c.name.to_owned(),
                    type_oid: c.type_oid,
                    base_type_oid: base.oid,
                    type_modifier: c.type_modifier,
                    base_type_modifier: if c.type_modifier == -1 {
                        base.type_modifier
                    } else {
                        c.type_modifier
                    },
                    is_key: c.flags & FLAG_IDENTITY != 0,
                }
            })
            .collect();
        Self::from_catalog(
            msg.oid,
            msg.namespace,
            msg.name,
            msg.replica_identity,
            columns,
        )
    }

    /// A relation described by the catalog rather than by a Relation message (the initial
    /// snapshot: `pg_class`, `pg_attribute` restricted to the published columns in attnum
    /// order, `relreplident`). Named exactly as [`Relation::from_message`] names it, so
    /// snapshot rows and streamed changes land in the same `schema.table`. The caller
    /// resolves each column's base type and modifier as [`Relation::from_message`] does
    /// with the same catalog, and `is_key` (replica identity membership) as pgoutput would.
    pub fn from_catalog(
        oid: u32,
        namespace: &str,
        name: &str,
        replica_identity: u8,
        columns: Vec<Column>,
    ) -> Self {
        // pgoutput sends an empty namespace for pg_catalog; both constructors agree.
        let namespace = if namespace.is_empty() {
            "pg_catalog"
        } else {
            namespace
        };
        Self {
            oid,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            qualified_name: format!("{namespace}.{name}"),
            replica_identity,
            columns,
        }
    }
}

/// What the catalog says a user type's values are: a built-in type (a domain's base type,
/// `text` for an enum or a text-like type such as citext, whose send format is text's)
/// and the modifier that applies to it (a domain's `typtypmod`, or -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseType {
    pub oid: u32,
    pub type_modifier: i32,
}

/// User type OID -> [`BaseType`], looked up in `pg_type` by the live client (see
/// `pgwire_cdc.catalog.type_map`). Type messages only name a type; the catalog also
/// resolves enums, text-like extension types and domain modifiers, which the binary
/// format needs.
pub type TypeCatalog = HashMap<u32, BaseType>;

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

/// The scalar types the value layer decodes, by OID.
const BUILTIN_SCALARS: &[u32] = &[
    16, 17, 19, 20, 21, 23, 25, 26, 28, 29, 114, 142, 650, 700, 701, 774, 790, 829, 869, 1042,
    1043, 1082, 1083, 1114, 1184, 1186, 1266, 1700, 2950, 3614, 3802, 3904, 3906, 3908, 3910, 3912,
    3926, 4451, 4532, 4533, 4534, 4535, 4536,
];

/// The built-in type a Type message names, if it names one.
///
/// pgoutput describes every non-built-in column type with a Type message; for a domain it
/// sends the domain's OID with its *base type's* namespace and name
/// (`logicalrep_write_typ` looks the base type up), so a domain over a built-in type
/// shows up as, say, `pg_catalog.int4` (or `pg_catalog._int4` over an array): its values
/// are that type's, in both formats.
pub fn base_type_oid(info: &TypeInfo) -> Option<u32> {
    if info.namespace != "pg_catalog" {
        return None;
    }
    let (element, is_array) = match info.name.strip_prefix('_') {
        Some(element) => (element, true),
        None => (info.name.as_str(), false),
    };
    let scalar = BUILTIN_SCALARS
        .iter()
        .filter_map(|&oid| Scalar::from_oid(oid, -1))
        .find(|s| s.name() == element)?;
    Some(if is_array {
        scalar.array_oid()
    } else {
        scalar.oid()
    })
}
