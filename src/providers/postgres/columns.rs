//! The column contract of a `postgres` query — the one the `sqlite` provider follows —
//! and rows mapped to items. `id` (text, integer or uuid) is required; `title` and
//! `content` are text (or numbers, in their text form); `updated_at` is a `timestamptz`,
//! `timestamp` (read as UTC), `date` or text; a column named `metadata` must be `json` or
//! `jsonb` and hold an object, whose keys become the item's metadata; every other column
//! (text, integer, float, boolean, uuid, json, timestamps) becomes one metadata key.
//! Types ctxd does not read (`numeric`, arrays, `bytea`, …) are refused when the query is
//! prepared, naming the column, so the operator casts them in SQL.
//!
//! Sizes are checked on the wire bytes before a value is decoded: a single value larger
//! than a whole response is refused without being copied.

use crate::bounds::{self, BoundsViolation};
use crate::providers::items::{self, ItemDraft, ParseProblem};
use crate::timestamp::rfc3339_utc;
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::error::Error;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Column, Row};

/// How one column's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    Text,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Bool,
    Json,
    Uuid,
    /// `timestamp` and `timestamptz`: microseconds since 2000-01-01 UTC on the wire.
    Timestamp,
    Date,
}

impl Reader {
    fn of(ty: &Type) -> Option<Reader> {
        Some(match *ty {
            Type::INT2 => Reader::Int2,
            Type::INT4 => Reader::Int4,
            Type::INT8 => Reader::Int8,
            Type::FLOAT4 => Reader::Float4,
            Type::FLOAT8 => Reader::Float8,
            Type::BOOL => Reader::Bool,
            Type::JSON | Type::JSONB => Reader::Json,
            Type::UUID => Reader::Uuid,
            Type::TIMESTAMP | Type::TIMESTAMPTZ => Reader::Timestamp,
            Type::DATE => Reader::Date,
            _ if <String as FromSql>::accepts(ty) => Reader::Text,
            _ => return None,
        })
    }
}

/// Which result column feeds which item field, decided from the prepared statement.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    id: (usize, Reader),
    title: Option<(usize, Reader)>,
    content: Option<(usize, Reader)>,
    updated_at: Option<(usize, Reader)>,
    /// The `metadata` column (json/jsonb), if any.
    metadata_object: Option<usize>,
    /// Every other column: one metadata key each.
    metadata: Vec<(usize, String, Reader)>,
}

/// Why a row could not become an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowProblem {
    /// A value does not have the contract's shape.
    Malformed,
    /// A value is larger than a whole response.
    TooLarge,
    /// A bound of the contract crossed while the row was mapped.
    Bounds(BoundsViolation),
}

impl From<BoundsViolation> for RowProblem {
    fn from(violation: BoundsViolation) -> Self {
        RowProblem::Bounds(violation)
    }
}

impl Layout {
    /// The layout of a statement's result columns, or what is wrong with them, in words
    /// that name the column.
    pub(crate) fn of(columns: &[Column]) -> Result<Layout, String> {
        for (index, column) in columns.iter().enumerate() {
            if columns[..index].iter().any(|c| c.name() == column.name()) {
                return Err(format!(
                    "returns two columns named `{}`: alias one of them",
                    column.name()
                ));
            }
        }
        let mut readers = Vec::with_capacity(columns.len());
        for column in columns {
            let reader = Reader::of(column.type_()).ok_or_else(|| {
                format!(
                    "column `{}` has type {}, which ctxd does not read: cast it in the query (to text, bigint, double precision, boolean, jsonb or timestamptz)",
                    column.name(),
                    column.type_().name()
                )
            })?;
            readers.push(reader);
        }
        let find = |wanted: &str| columns.iter().position(|c| c.name() == wanted);
        let with = |index: usize| (index, readers[index]);
        let id_index = find("id").ok_or("returns no `id` column: alias the record id AS id")?;
        if !matches!(
            readers[id_index],
            Reader::Text | Reader::Int2 | Reader::Int4 | Reader::Int8 | Reader::Uuid
        ) {
            return Err(format!(
                "column `id` has type {}: use text, an integer or uuid",
                columns[id_index].type_().name()
            ));
        }
        let textual = |name: &str| -> Result<Option<(usize, Reader)>, String> {
            match find(name) {
                None => Ok(None),
                Some(index) => match readers[index] {
                    Reader::Text
                    | Reader::Int2
                    | Reader::Int4
                    | Reader::Int8
                    | Reader::Float4
                    | Reader::Float8 => Ok(Some(with(index))),
                    _ => Err(format!(
                        "column `{name}` has type {}: use text",
                        columns[index].type_().name()
                    )),
                },
            }
        };
        let title = textual("title")?;
        let content = textual("content")?;
        let updated_at = match find("updated_at") {
            None => None,
            Some(index) => match readers[index] {
                Reader::Timestamp | Reader::Date | Reader::Text => Some(with(index)),
                _ => {
                    return Err(format!(
                        "column `updated_at` has type {}: use timestamptz, timestamp, date or text (RFC 3339)",
                        columns[index].type_().name()
                    ));
                }
            },
        };
        let metadata_object = match find("metadata") {
            None => None,
            Some(index) if readers[index] == Reader::Json => Some(index),
            Some(index) => {
                return Err(format!(
                    "column `metadata` has type {}: it must be json or jsonb (an object whose keys become the item's metadata)",
                    columns[index].type_().name()
                ));
            }
        };
        let metadata = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !matches!(
                    c.name(),
                    "id" | "title" | "content" | "updated_at" | "metadata"
                )
            })
            .map(|(index, c)| (index, c.name().to_owned(), readers[index]))
            .collect();
        Ok(Layout {
            id: with(id_index),
            title,
            content,
            updated_at,
            metadata_object,
            metadata,
        })
    }

    /// The wire size of a row: the sum of its values' lengths.
    pub(crate) fn row_bytes(row: &Row) -> Result<usize, RowProblem> {
        let mut total = 0usize;
        for index in 0..row.len() {
            let RawSize(size) = row.try_get(index).map_err(|_| RowProblem::Malformed)?;
            if size > bounds::MAX_RESPONSE_BYTES {
                return Err(RowProblem::TooLarge);
            }
            total += size;
        }
        Ok(total)
    }

    /// One row into `item`: each value measured by the builder before it is copied
    /// (texts are borrowed from the row, JSON is parsed within the value count).
    pub(crate) fn item(&self, row: &Row, item: &mut ItemDraft) -> Result<(), RowProblem> {
        match read_text(row, self.id)? {
            Some(id) => item.id(id)?,
            None => return Err(RowProblem::Malformed),
        }
        if let Some(field) = self.title
            && let Some(title) = read_text(row, field)?
        {
            item.title(title)?;
        }
        if let Some(field) = self.content
            && let Some(content) = read_text(row, field)?
        {
            item.content(content)?;
        }
        if let Some(field) = self.updated_at {
            match read(row, field)? {
                Value::Null => {}
                Value::String(text) => item.updated_at(text)?,
                _ => return Err(RowProblem::Malformed),
            }
        }
        if let Some(index) = self.metadata_object {
            match read(row, (index, Reader::Json))? {
                Value::Null => {}
                Value::Object(object) => {
                    for (key, value) in object {
                        item.metadata_owned(key, value)?;
                    }
                }
                _ => return Err(RowProblem::Malformed),
            }
        }
        for (index, name, reader) in &self.metadata {
            if *reader == Reader::Text {
                match get::<&str>(row, *index)? {
                    Some(text) => item.metadata_text(name, Cow::Borrowed(text))?,
                    None => item.metadata_owned(name.clone(), Value::Null)?,
                }
                continue;
            }
            item.metadata_owned(name.clone(), read(row, (*index, *reader))?)?;
        }
        Ok(())
    }
}

fn get<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<Option<T>, RowProblem> {
    row.try_get(index).map_err(|_| RowProblem::Malformed)
}

/// `id`, `title`, `content`: text borrowed from the row, or a number's text; `None` for
/// NULL.
fn read_text(
    row: &Row,
    (index, reader): (usize, Reader),
) -> Result<Option<Cow<'_, str>>, RowProblem> {
    if reader == Reader::Text {
        return Ok(get::<&str>(row, index)?.map(Cow::Borrowed));
    }
    match read(row, (index, reader))? {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(Cow::Owned(text))),
        Value::Number(number) => Ok(Some(Cow::Owned(number.to_string()))),
        _ => Err(RowProblem::Malformed),
    }
}

/// A column's value as JSON: numbers, strings, booleans, JSON as is, timestamps and dates
/// as RFC 3339 UTC strings, SQL NULL as null.
fn read(row: &Row, (index, reader): (usize, Reader)) -> Result<Value, RowProblem> {
    let float = |number: Option<f64>| match number {
        None => Ok(Value::Null),
        Some(number) => Number::from_f64(number)
            .map(Value::Number)
            .ok_or(RowProblem::Malformed),
    };
    Ok(match reader {
        Reader::Text => get::<String>(row, index)?.map_or(Value::Null, Value::String),
        Reader::Int2 => get::<i16>(row, index)?.map_or(Value::Null, Value::from),
        Reader::Int4 => get::<i32>(row, index)?.map_or(Value::Null, Value::from),
        Reader::Int8 => get::<i64>(row, index)?.map_or(Value::Null, Value::from),
        Reader::Float4 => float(get::<f32>(row, index)?.map(f64::from))?,
        Reader::Float8 => float(get::<f64>(row, index)?)?,
        Reader::Bool => get::<bool>(row, index)?.map_or(Value::Null, Value::Bool),
        Reader::Json => match get::<BoundedJson>(row, index) {
            Ok(json) => json.map_or(Value::Null, |json| json.0),
            Err(_) if too_many_values(row, index) => {
                return Err(RowProblem::Bounds(BoundsViolation::TooManyValues {
                    limit: items::MAX_VALUES,
                }));
            }
            Err(problem) => return Err(problem),
        },
        Reader::Uuid => get::<UuidText>(row, index)?.map_or(Value::Null, |u| Value::String(u.0)),
        Reader::Timestamp => match get::<Micros>(row, index)? {
            None => Value::Null,
            Some(Micros(micros)) => Value::String(timestamp_text(micros)?),
        },
        Reader::Date => match get::<Days>(row, index)? {
            None => Value::Null,
            Some(Days(days)) => Value::String(
                rfc3339_utc((i64::from(days) + POSTGRES_EPOCH_DAYS) * 86_400)
                    .ok_or(RowProblem::Malformed)?,
            ),
        },
    })
}

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const POSTGRES_EPOCH_DAYS: i64 = 10_957;

/// Microseconds since 2000-01-01 UTC as RFC 3339 (whole seconds); `infinity` and years
/// past 9999 are malformed.
fn timestamp_text(micros: i64) -> Result<String, RowProblem> {
    let seconds = micros.div_euclid(1_000_000) + POSTGRES_EPOCH_DAYS * 86_400;
    rfc3339_utc(seconds).ok_or(RowProblem::Malformed)
}

/// A `json` or `jsonb` value parsed into at most [`items::MAX_VALUES`] JSON values
/// ([`items::parse_bounded`]): a value of a million tiny numbers stops the parse instead
/// of costing tens of bytes each.
struct BoundedJson(Value);

impl<'a> FromSql<'a> for BoundedJson {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let text = json_text(ty, raw)?;
        items::parse_bounded(text, items::MAX_VALUES)
            .map(BoundedJson)
            .map_err(|problem| format!("{problem:?}").into())
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

/// The JSON text of a `json` or `jsonb` value: `jsonb`'s binary form is its version
/// byte (1) and the text.
fn json_text<'a>(ty: &Type, raw: &'a [u8]) -> Result<&'a [u8], Box<dyn Error + Sync + Send>> {
    if *ty == Type::JSONB {
        match raw.split_first() {
            Some((1, text)) => Ok(text),
            _ => Err("unsupported jsonb version".into()),
        }
    } else {
        Ok(raw)
    }
}

/// Whether the JSON value at `index` failed to parse for its count of values alone.
fn too_many_values(row: &Row, index: usize) -> bool {
    struct Counted(bool);
    impl<'a> FromSql<'a> for Counted {
        fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
            let text = json_text(ty, raw)?;
            Ok(Counted(
                items::parse_bounded(text, items::MAX_VALUES) == Err(ParseProblem::TooManyValues),
            ))
        }
        fn accepts(ty: &Type) -> bool {
            *ty == Type::JSON || *ty == Type::JSONB
        }
    }
    matches!(
        row.try_get::<_, Option<Counted>>(index),
        Ok(Some(Counted(true)))
    )
}

/// The wire length of any value (0 for NULL), read without decoding it.
struct RawSize(usize);

impl<'a> FromSql<'a> for RawSize {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(RawSize(raw.len()))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(RawSize(0))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A `uuid` in its hyphenated text form.
struct UuidText(String);

impl<'a> FromSql<'a> for UuidText {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        if raw.len() != 16 {
            return Err("a uuid is 16 bytes".into());
        }
        let hex = hex::encode(raw);
        Ok(UuidText(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }
}

/// `timestamp`/`timestamptz` on the wire.
struct Micros(i64);

impl<'a> FromSql<'a> for Micros {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let bytes: [u8; 8] = raw.try_into().map_err(|_| "a timestamp is 8 bytes")?;
        Ok(Micros(i64::from_be_bytes(bytes)))
    }
    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::TIMESTAMP | Type::TIMESTAMPTZ)
    }
}

/// `date` on the wire: days since 2000-01-01.
struct Days(i32);

impl<'a> FromSql<'a> for Days {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let bytes: [u8; 4] = raw.try_into().map_err(|_| "a date is 4 bytes")?;
        Ok(Days(i32::from_be_bytes(bytes)))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::DATE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_from_the_postgres_epoch() {
        assert_eq!(timestamp_text(0), Ok("2000-01-01T00:00:00Z".to_owned()));
        assert_eq!(
            timestamp_text(-1),
            Ok("1999-12-31T23:59:59Z".to_owned()),
            "fractions round down"
        );
        assert_eq!(
            timestamp_text(849_312_000_000_000 + 1_500_000),
            Ok("2026-11-30T00:00:01Z".to_owned())
        );
        // `infinity` is i64::MAX on the wire.
        assert_eq!(timestamp_text(i64::MAX), Err(RowProblem::Malformed));
        assert_eq!(timestamp_text(i64::MIN), Err(RowProblem::Malformed));
    }

    #[test]
    fn uuids_read_as_hyphenated_text() {
        let raw: Vec<u8> = (0u8..16).collect();
        let UuidText(text) = UuidText::from_sql(&Type::UUID, &raw).unwrap();
        assert_eq!(text, "00010203-0405-0607-0809-0a0b0c0d0e0f");
        assert!(UuidText::from_sql(&Type::UUID, &raw[..4]).is_err());
    }

    #[test]
    fn readers_cover_the_contract_and_refuse_the_rest() {
        assert_eq!(Reader::of(&Type::VARCHAR), Some(Reader::Text));
        assert_eq!(Reader::of(&Type::JSONB), Some(Reader::Json));
        assert_eq!(Reader::of(&Type::TIMESTAMPTZ), Some(Reader::Timestamp));
        assert_eq!(Reader::of(&Type::NUMERIC), None);
        assert_eq!(Reader::of(&Type::BYTEA), None);
        assert_eq!(Reader::of(&Type::TEXT_ARRAY), None);
    }
}
