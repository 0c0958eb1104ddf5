//! One event spec with every field type, for the trace targets: records of
//! its events decode field by field instead of stopping at an unknown id.

use loupe_trace::spec::Spec;
use std::sync::OnceLock;

pub const XML: &str = "<events name='fuzz'>
<event name='A::B::Scalars' description='d'><layerId value='A'/><classId value='B'/><specifier value='Scalars'/>
<fields><field name='a' type='uint8' description='d'/><field name='b' type='int16' description='d'/>
<field name='c' type='uint32' description='d'/><field name='d' type='int64' description='d'/>
<field name='e' type='float64' description='d'/></fields></event>
<event name='A::B::Text' description='d'><layerId value='A'/><classId value='B'/><specifier value='Text'/>
<fields><field name='s' type='string' description='d'/><field name='l' type='list' eltType='uint16' description='d'/>
<field name='m' type='list' eltType='int64' description='d'/></fields></event>
<event name='A::B::Empty' description='d'><layerId value='A'/><classId value='B'/><specifier value='Empty'/></event>
</events>";

/// The spec, parsed once per process.
pub fn spec() -> &'static Spec {
    static SPEC: OnceLock<Spec> = OnceLock::new();
    SPEC.get_or_init(|| loupe_trace::spec::parse(&[("fuzz.xml", XML)]).expect("the fuzz spec is valid"))
}
