//! devicecontroller: owns the Device and DeviceModel custom resources, sends desired device
//! state to the node hosting each device and writes reported state back (KubeEdge:
//! cloudcore's devicecontroller). Not implemented yet: this crate holds its place in the
//! workspace (architecture.md §4).
