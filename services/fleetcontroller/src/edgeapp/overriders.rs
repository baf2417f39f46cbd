//! A target's [`Overriders`] applied to one Deployment manifest (JSON), in KubeEdge's order:
//! replicas, image, command, args, env, resources. Only `spec.template.spec.containers` are
//! edited (not init containers), as in KubeEdge.

use serde_json::{Map, Value, json};

use super::image::{ImageError, ImageRef};
use crate::api::edgeapp::{EnvOverrider, Operator, Overriders, WordsOverrider};

/// Why an overrider cannot be applied; the target's copy of the Deployment is then not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// A container image the image overriders edit is not a valid reference.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// An image predicate's path does not lead to a string.
    #[error("image path {0:?} does not name an image in the manifest")]
    ImagePath(String),
    /// The Deployment has no `spec.template.spec.containers` list.
    #[error("the manifest has no spec.template.spec.containers")]
    NoContainers,
    /// An overrider names a container the pod template does not have.
    #[error("no container {0:?} in the pod template")]
    NoContainer(String),
    /// An operator the field does not take (e.g. `replace` for command or args).
    #[error("operator {operator:?} is not valid for {field}")]
    Operator {
        /// `command` or `args`.
        field: &'static str,
        /// The operator given.
        operator: Operator,
    },
}

/// Applies `overriders` to `deployment` in place.
///
/// # Errors
/// [`OverrideError`] naming the first overrider that cannot be applied; `deployment` may
/// then be partly edited and must be dropped.
pub fn apply(deployment: &mut Value, overriders: &Overriders) -> Result<(), OverrideError> {
    if let Some(replicas) = overriders.replicas {
        object(deployment, "spec").insert("replicas".to_owned(), json!(replicas));
    }
    for edit in &overriders.image_overriders {
        let pointers = match &edit.predicate {
            Some(predicate) => vec![predicate.path.clone()],
            None => (0..containers(deployment)?.len())
                .map(|i| format!("/spec/template/spec/containers/{i}/image"))
                .collect(),
        };
        for pointer in pointers {
            let field = deployment
                .pointer_mut(&pointer)
                .filter(|v| v.is_string())
                .ok_or_else(|| OverrideError::ImagePath(pointer.clone()))?;
            let mut image = ImageRef::parse(field.as_str().unwrap_or_default())?;
            image.edit(edit.component, edit.operator, &edit.value);
            *field = Value::String(image.to_string());
        }
    }
    for edit in &overriders.command_overriders {
        words(deployment, "command", edit)?;
    }
    for edit in &overriders.args_overriders {
        words(deployment, "args", edit)?;
    }
    for edit in &overriders.env_overriders {
        env(deployment, edit)?;
    }
    for edit in &overriders.resources_overriders {
        let container = container(deployment, &edit.container_name)?;
        let resources = object(container, "resources");
        for (field, quantities) in [
            ("requests", &edit.value.requests),
            ("limits", &edit.value.limits),
        ] {
            for (name, quantity) in quantities.iter().flatten() {
                object_at(resources, field).insert(name.clone(), json!(quantity.0));
            }
        }
    }
    Ok(())
}

/// `add` appends the words; `remove` drops every word equal to one of them.
fn words(
    deployment: &mut Value,
    field: &'static str,
    edit: &WordsOverrider,
) -> Result<(), OverrideError> {
    let container = container(deployment, &edit.container_name)?;
    let list = array(container, field);
    match edit.operator {
        Operator::Add => list.extend(edit.value.iter().map(|w| json!(w))),
        Operator::Remove => {
            list.retain(|w| !edit.value.iter().any(|v| w.as_str() == Some(v.as_str())));
        }
        Operator::Replace => {
            return Err(OverrideError::Operator {
                field,
                operator: edit.operator,
            });
        }
    }
    Ok(())
}

/// `add` and `replace` set each variable (replacing the one of the same name in place, else
/// appending), so a name appears once; `remove` drops the variables of these names.
fn env(deployment: &mut Value, edit: &EnvOverrider) -> Result<(), OverrideError> {
    let container = container(deployment, &edit.container_name)?;
    let list = array(container, "env");
    for var in &edit.value {
        let position = list
            .iter()
            .position(|v| v["name"].as_str() == Some(var.name.as_str()));
        match (edit.operator, position) {
            (Operator::Remove, Some(i)) => {
                list.remove(i);
            }
            (Operator::Remove, None) => {}
            (_, Some(i)) => list[i] = json!(var),
            (_, None) => list.push(json!(var)),
        }
    }
    Ok(())
}

/// The pod template's containers.
fn containers(deployment: &mut Value) -> Result<&mut Vec<Value>, OverrideError> {
    deployment
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        .ok_or(OverrideError::NoContainers)
}

/// The container named `name`.
fn container<'a>(deployment: &'a mut Value, name: &str) -> Result<&'a mut Value, OverrideError> {
    containers(deployment)?
        .iter_mut()
        .find(|c| c["name"].as_str() == Some(name))
        .ok_or_else(|| OverrideError::NoContainer(name.to_owned()))
}

/// The object at `value[key]`, made an empty object when missing or not an object;
/// `value` must be an object (a manifest is one).
pub(crate) fn object<'a>(value: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let map = value.as_object_mut().expect("manifests are objects");
    object_at(map, key)
}

pub(crate) fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let entry = map.entry(key.to_owned()).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("made an object above")
}

/// The array at `value[key]`, made an empty array when missing or not an array.
fn array<'a>(value: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    let entry = value
        .as_object_mut()
        .expect("containers are objects")
        .entry(key.to_owned())
        .or_insert_with(|| json!([]));
    if !entry.is_array() {
        *entry = json!([]);
    }
    entry.as_array_mut().expect("made an array above")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1.0", "args": ["-v"],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "reg.io/side"}
            ]}}}
        })
    }

    fn overriders(yaml: &str) -> Overriders {
        serde_norway::from_str(yaml).expect("valid YAML")
    }

    #[test]
    fn every_overrider_applies_in_order() {
        let mut d = deployment();
        apply(
            &mut d,
            &overriders(
                "replicas: 3\n\
                 imageOverriders: [{component: Tag, operator: replace, value: '2.0'}, \
                   {component: Registry, operator: replace, value: 'mirror.local:5000', \
                    predicate: {path: /spec/template/spec/containers/1/image}}]\n\
                 commandOverriders: [{containerName: app, operator: add, value: [serve]}]\n\
                 argsOverriders: [{containerName: app, operator: remove, value: ['-v']}]\n\
                 envOverriders: [{containerName: app, operator: replace, value: [{name: A, value: x}, {name: C, value: y}]}, \
                   {containerName: app, operator: remove, value: [{name: B}]}]\n\
                 resourcesOverriders: [{containerName: app, value: {limits: {cpu: 500m}}}]\n",
            ),
        )
        .expect("every overrider applies");
        let app = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(app["image"], "nginx:2.0");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][1]["image"],
            "mirror.local:5000/side:2.0"
        );
        assert_eq!(app["command"], json!(["serve"]));
        assert_eq!(app["args"], json!([]));
        assert_eq!(
            app["env"],
            json!([{"name": "A", "value": "x"}, {"name": "C", "value": "y"}])
        );
        assert_eq!(app["resources"], json!({"limits": {"cpu": "500m"}}));
    }

    #[test]
    fn a_missing_container_or_bad_path_is_an_error() {
        let mut d = deployment();
        assert_eq!(
            apply(
                &mut d,
                &overriders("argsOverriders: [{containerName: nope, operator: add, value: [x]}]")
            ),
            Err(OverrideError::NoContainer("nope".to_owned()))
        );
        let mut d = deployment();
        assert!(matches!(
            apply(
                &mut d,
                &overriders(
                    "imageOverriders: [{component: Tag, operator: add, value: x, predicate: {path: /spec/replicas}}]"
                )
            ),
            Err(OverrideError::ImagePath(_))
        ));
        let mut d = deployment();
        assert!(matches!(
            apply(
                &mut d,
                &overriders(
                    "commandOverriders: [{containerName: app, operator: replace, value: [x]}]"
                )
            ),
            Err(OverrideError::Operator {
                field: "command",
                ..
            })
        ));
    }
}
