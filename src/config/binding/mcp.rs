//! The settings of a `type = "mcp"` provider: how to reach the MCP server (streamable
//! HTTP `url`, or a stdio `command`) and what a lookup does there (call a `tool` with the
//! value as one named argument, or read a `resource` whose URI template has the value as
//! its one slot). Pure: nothing is started or contacted here.

use super::{Problems, check_endpoint, index_path, key_path, kind_in_words};
use serde_json::{Value as Json, json};
use url::Url;

/// Keys only an MCP provider has; taken out of a provider's table before the common
/// identity keys are parsed.
pub(super) const MCP_KEYS: &[&str] = &[
    "url",
    "auth_env",
    "command",
    "args",
    "env",
    "tool",
    "argument",
    "arguments",
    "resource",
];

/// Most environment variables a stdio server may be given.
const MAX_ENV: usize = 64;

/// A validated MCP provider binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpBinding {
    pub transport: McpTransport,
    pub lookup: McpLookup,
}

/// How the MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// Streamable HTTP at `url`, with `Authorization: Bearer $auth_env` if named.
    Http { url: Url, auth_env: Option<String> },
    /// A child process speaking MCP on stdin/stdout; it sees only the variables in `env`.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<String>,
    },
}

/// What one lookup asks the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpLookup {
    /// `tools/call` of `tool`, the lookup value in `argument`, `fixed` beside it.
    Tool {
        tool: String,
        argument: String,
        fixed: serde_json::Map<String, Json>,
    },
    /// `resources/read` of `template` with its one `{slot}` replaced by the value,
    /// percent-encoded.
    Resource { template: String },
}

impl McpBinding {
    /// The env var holding the bearer token, if any.
    pub(crate) fn auth_env(&self) -> Option<&str> {
        match &self.transport {
            McpTransport::Http { auth_env, .. } => auth_env.as_deref(),
            McpTransport::Stdio { .. } => None,
        }
    }
}

/// Checks the MCP keys of a provider at `path`; `None` after recording every problem.
/// Also returns the settings as written, for the binding's digest.
pub(super) fn check_mcp(
    problems: &mut Problems,
    path: &str,
    table: &toml::Table,
) -> Option<(McpBinding, Json)> {
    let before = problems.len();
    let string = |problems: &mut Problems, key: &str| -> Option<String> {
        match table.get(key)? {
            toml::Value::String(text) if text.trim().is_empty() => {
                problems.add(&key_path(path, key), "must not be empty");
                None
            }
            toml::Value::String(text) => Some(text.clone()),
            other => {
                problems.add(
                    &key_path(path, key),
                    format!("must be a string (found {})", kind_in_words(other)),
                );
                None
            }
        }
    };
    let strings = |problems: &mut Problems, key: &str| -> Vec<String> {
        match table.get(key) {
            None => Vec::new(),
            Some(toml::Value::Array(values)) => values
                .iter()
                .enumerate()
                .filter_map(|(i, value)| match value {
                    toml::Value::String(text) => Some(text.clone()),
                    other => {
                        problems.add(
                            &index_path(&key_path(path, key), i),
                            format!("must be a string (found {})", kind_in_words(other)),
                        );
                        None
                    }
                })
                .collect(),
            Some(other) => {
                problems.add(
                    &key_path(path, key),
                    format!("must be a list of strings (found {})", kind_in_words(other)),
                );
                Vec::new()
            }
        }
    };

    let transport = match (table.get("url"), table.get("command")) {
        (Some(_), Some(_)) => {
            problems.add(
                &key_path(path, "command"),
                "an mcp provider has either `url` (streamable HTTP) or `command` (stdio), not both",
            );
            None
        }
        (None, None) => {
            problems.add(
                path,
                "an mcp provider needs `url` (streamable HTTP, https://) or `command` (a stdio server)",
            );
            None
        }
        (Some(_), None) => {
            for key in ["args", "env"] {
                if table.contains_key(key) {
                    problems.add(
                        &key_path(path, key),
                        format!("`{key}` is a setting of stdio servers (`command`), not of `url`"),
                    );
                }
            }
            let url = string(problems, "url")
                .and_then(|url| check_endpoint(problems, &key_path(path, "url"), &url));
            let auth_env = string(problems, "auth_env");
            if let Some(name) = &auth_env {
                problems.env_name(&key_path(path, "auth_env"), name);
            }
            url.map(|url| McpTransport::Http { url, auth_env })
        }
        (None, Some(_)) => {
            if table.contains_key("auth_env") {
                problems.add(
                    &key_path(path, "auth_env"),
                    "`auth_env` is a setting of streamable HTTP servers (`url`); name the variables a stdio server may see in `env`",
                );
            }
            let command = string(problems, "command");
            let args = strings(problems, "args");
            let env = strings(problems, "env");
            for (i, name) in env.iter().enumerate() {
                problems.env_name(&index_path(&key_path(path, "env"), i), name);
            }
            if env.len() > MAX_ENV {
                problems.add(
                    &key_path(path, "env"),
                    format!("names {} variables: at most {MAX_ENV}", env.len()),
                );
            }
            command.map(|command| McpTransport::Stdio { command, args, env })
        }
    };

    let lookup = match (table.get("tool"), table.get("resource")) {
        (Some(_), Some(_)) => {
            problems.add(
                &key_path(path, "resource"),
                "a lookup either calls a `tool` or reads a `resource`, not both",
            );
            None
        }
        (None, None) => {
            problems.add(
                path,
                "an mcp provider needs `tool` (a tool to call with the lookup value) or `resource` (a URI template with one {slot})",
            );
            None
        }
        (Some(_), None) => {
            let tool = string(problems, "tool");
            let argument = string(problems, "argument");
            if argument.is_none() && !table.contains_key("argument") {
                problems.add(
                    &key_path(path, "argument"),
                    "is required with `tool`: the name of the tool argument that receives the lookup value",
                );
            }
            let fixed = match table.get("arguments") {
                None => Some(serde_json::Map::new()),
                Some(toml::Value::Table(fixed)) => match serde_json::to_value(fixed) {
                    Ok(Json::Object(fixed)) => Some(fixed),
                    _ => {
                        problems.add(&key_path(path, "arguments"), "cannot be expressed as JSON");
                        None
                    }
                },
                Some(other) => {
                    problems.add(
                        &key_path(path, "arguments"),
                        format!(
                            "must be a table of fixed tool arguments (found {})",
                            kind_in_words(other)
                        ),
                    );
                    None
                }
            };
            if let (Some(argument), Some(fixed)) = (&argument, &fixed)
                && fixed.contains_key(argument)
            {
                problems.add(
                    &key_path(&key_path(path, "arguments"), argument),
                    format!("{argument:?} receives the lookup value: it cannot also be fixed"),
                );
            }
            match (tool, argument, fixed) {
                (Some(tool), Some(argument), Some(fixed)) => Some(McpLookup::Tool {
                    tool,
                    argument,
                    fixed,
                }),
                _ => None,
            }
        }
        (None, Some(_)) => {
            for key in ["argument", "arguments"] {
                if table.contains_key(key) {
                    problems.add(
                        &key_path(path, key),
                        format!("`{key}` is a setting of `tool` lookups, not of `resource`"),
                    );
                }
            }
            string(problems, "resource").and_then(|template| match template_problem(&template) {
                Some(problem) => {
                    problems.add(&key_path(path, "resource"), problem);
                    None
                }
                None => Some(McpLookup::Resource { template }),
            })
        }
    };

    if problems.len() > before {
        return None;
    }
    let (transport, lookup) = (transport?, lookup?);
    let written = json!({
        "type": "mcp",
        "url": table.get("url").and_then(toml::Value::as_str),
        "auth_env": table.get("auth_env").and_then(toml::Value::as_str),
        "command": table.get("command").and_then(toml::Value::as_str),
        "args": table.get("args").and_then(|v| serde_json::to_value(v).ok()),
        "env": table.get("env").and_then(|v| serde_json::to_value(v).ok()),
        "tool": table.get("tool").and_then(toml::Value::as_str),
        "argument": table.get("argument").and_then(toml::Value::as_str),
        "arguments": table.get("arguments").and_then(|v| serde_json::to_value(v).ok()),
        "resource": table.get("resource").and_then(toml::Value::as_str),
    });
    Some((McpBinding { transport, lookup }, written))
}

/// What is wrong with a resource URI template, if anything: it must hold exactly one
/// `{slot}` (a non-empty name without braces).
pub(crate) fn template_problem(template: &str) -> Option<String> {
    let opens = template.matches('{').count();
    let closes = template.matches('}').count();
    if opens != 1 || closes != 1 {
        return Some(format!(
            "{template:?} must hold exactly one {{slot}} for the lookup value"
        ));
    }
    let (start, end) = (template.find('{')?, template.find('}')?);
    if end < start + 2 {
        return Some(format!(
            "{template:?}: the {{slot}} must have a name, e.g. {{customer}}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<McpBinding, Vec<String>> {
        let table: toml::Table = text.parse().unwrap();
        let mut problems = Problems::default();
        let found = check_mcp(&mut problems, "providers.crm", &table);
        if problems.is_empty() {
            Ok(found.unwrap().0)
        } else {
            Err(problems
                .into_screened()
                .iter()
                .map(|p| p.to_string())
                .collect())
        }
    }

    #[test]
    fn a_stdio_tool_binding_is_read() {
        let binding = check(
            r#"command = "python3"
               args = ["server.py", "stdio"]
               env = ["PATH", "HOME"]
               tool = "lookup"
               argument = "customer"
               arguments = { region = "eu", verbose = true }"#,
        )
        .unwrap();
        assert_eq!(
            binding.transport,
            McpTransport::Stdio {
                command: "python3".into(),
                args: vec!["server.py".into(), "stdio".into()],
                env: vec!["PATH".into(), "HOME".into()],
            }
        );
        let McpLookup::Tool { fixed, .. } = &binding.lookup else {
            panic!("a tool lookup")
        };
        assert_eq!(
            Json::Object(fixed.clone()),
            json!({"region": "eu", "verbose": true})
        );
    }

    #[test]
    fn an_http_resource_binding_is_read() {
        let binding = check(
            r#"url = "https://mcp.example.com/mcp"
               auth_env = "CRM_TOKEN"
               resource = "customers://{id}/profile""#,
        )
        .unwrap();
        assert_eq!(binding.auth_env(), Some("CRM_TOKEN"));
        assert_eq!(
            binding.lookup,
            McpLookup::Resource {
                template: "customers://{id}/profile".into()
            }
        );
    }

    #[test]
    fn each_mistake_is_named_by_its_key() {
        let problems = check(
            r#"url = "http://mcp.example.com/mcp"
               args = ["x"]
               tool = "lookup"
               arguments = { customer = "fixed" }
               argument = "customer""#,
        )
        .unwrap_err()
        .join("\n");
        assert!(problems.contains("providers.crm.url"), "{problems}");
        assert!(problems.contains("providers.crm.args"), "{problems}");
        assert!(
            problems.contains("providers.crm.arguments.customer"),
            "{problems}"
        );

        let problems = check(r#"command = "srv""#).unwrap_err().join("\n");
        assert!(problems.contains("needs `tool`"), "{problems}");
        let problems = check(r#"tool = "t""#).unwrap_err().join("\n");
        assert!(problems.contains("needs `url`"), "{problems}");
        assert!(problems.contains("argument: is required"), "{problems}");
        let problems = check(
            r#"command = "srv"
               env = ["NOT-A-NAME"]
               resource = "customers://{a}/{b}""#,
        )
        .unwrap_err()
        .join("\n");
        assert!(problems.contains("providers.crm.env[0]"), "{problems}");
        assert!(problems.contains("exactly one {slot}"), "{problems}");
    }

    #[test]
    fn in_a_binding_mcp_keys_belong_to_mcp_providers_only() {
        let parse = |text: &str| {
            super::super::Binding::parse(
                &format!("revision = \"r1\"\n[providers.x]\n{text}"),
                std::path::Path::new("/tmp"),
            )
        };
        let binding = parse("type = \"mcp\"\ncommand = \"/bin/srv\"\ntool = \"t\"\nargument = \"a\"\ntimeout_ms = 500")
            .unwrap();
        assert_eq!(binding.providers["x"].kind.type_name(), "mcp");
        let other = parse("type = \"mcp\"\ncommand = \"/bin/srv\"\ntool = \"u\"\nargument = \"a\"")
            .unwrap();
        assert_ne!(binding.digest, other.digest, "the tool is in the digest");

        let problems = parse("type = \"http\"\nendpoint = \"https://h/p\"\ntool = \"t\"")
            .unwrap_err()
            .to_string();
        assert!(
            problems.contains(
                "providers.x.tool: `tool` is a setting of mcp providers, not of http providers"
            ),
            "{problems}"
        );
        let problems = parse("type = \"mcp\"\nendpoint = \"https://h/p\"\nurl = \"https://h/mcp\"\ntool = \"t\"\nargument = \"a\"")
            .unwrap_err()
            .to_string();
        assert!(
            problems.contains("providers.x.endpoint: `endpoint` is not a setting of mcp providers"),
            "{problems}"
        );
    }

    #[test]
    fn templates_need_one_named_slot() {
        assert_eq!(template_problem("a://{x}"), None);
        assert!(template_problem("a://x").is_some());
        assert!(template_problem("a://{}").is_some());
        assert!(template_problem("a://{x}/{y}").is_some());
    }
}
