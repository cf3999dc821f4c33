//! The conformance checks against a real GPU. On a machine without one, each test first asserts
//! that [`probe`] reported [`Error::NoDriver`] or [`Error::NoDevice`] (so a broken probe cannot
//! hide behind the skip), prints that it skipped, and returns: the names say so. With
//! `RING_CUDA_REQUIRE_GPU=1` (set by `gpu-check.sh`) a missing GPU fails instead.
#![allow(clippy::std_instead_of_core, reason = "std test")]

mod common;

use common::conformance;
use ring_cuda::{probe, CudaDevice, Device, Error, ExportKind, Limits};

/// The device, or `None` after asserting that the probe reported no driver/device.
fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::new(0, Limits::default()) {
        Ok(d) => {
            eprintln!("{test}: running on {}", d.describe());
            Some(d)
        }
        Err(e @ (Error::NoDriver | Error::NoDevice)) => {
            // gpu-check.sh sets this on the GPU machine, where skipping would hide a failure.
            assert!(
                std::env::var_os("RING_CUDA_REQUIRE_GPU").is_none(),
                "{test}: RING_CUDA_REQUIRE_GPU is set but there is no GPU: {e}"
            );
            let p = probe();
            assert!(
                matches!(p, Err(Error::NoDriver | Error::NoDevice)),
                "CudaDevice::new said {e} but probe() said {p:?}"
            );
            eprintln!("{test}: SKIPPED, no GPU on this machine ({e})");
            None
        }
        Err(e) => panic!("{test}: the driver is present but failed: {e}"),
    }
}

/// The device, after `check` passed for each of its export kinds; `None` without a GPU.
fn each_kind(
    test: &str,
    check: impl Fn(&CudaDevice, ExportKind) -> conformance::Check,
) -> Option<CudaDevice> {
    let d = gpu(test)?;
    for k in kinds(&d) {
        check(&d, k).unwrap();
    }
    Some(d)
}

fn kinds(d: &CudaDevice) -> Vec<ExportKind> {
    let mut k = vec![ExportKind::Ipc];
    if d.supports_fd_export() {
        k.push(ExportKind::Fd);
    } else {
        eprintln!("device has no VMM fd export: Fd checks skipped");
    }
    k
}

#[test]
fn probe_agrees_with_the_environment() {
    match probe() {
        Ok(n) => assert!(n > 0, "probe returned Ok(0)"),
        Err(Error::NoDriver | Error::NoDevice) => {
            // Make sure the claim is consistent: constructing a device must fail the same way
            // instead of panicking inside cudarc.
            assert!(matches!(
                CudaDevice::new(0, Limits::default()),
                Err(Error::NoDriver | Error::NoDevice)
            ));
        }
        Err(e) => panic!("probe failed with a driver error: {e}"),
    }
}

#[test]
fn gpu_roundtrip_or_reports_no_gpu() {
    if let Some(d) = each_kind("gpu_roundtrip", conformance::roundtrip) {
        assert!(d.ledger().leak_report().is_empty());
    }
}

#[test]
fn gpu_ceilings_or_reports_no_gpu() {
    each_kind("gpu_ceilings", conformance::ceilings);
}

#[test]
fn gpu_event_ordering_or_reports_no_gpu() {
    each_kind("gpu_event_ordering", conformance::event_ordering);
}

#[test]
fn gpu_churn_returns_to_baseline_or_reports_no_gpu() {
    // In one process: allocation, export, events; the cross-process open/close cycles run in
    // the gpu-pipeline leak run (CUDA refuses to open a handle in its exporting process).
    each_kind("gpu_churn", |d, k| conformance::churn(d, None, 2000, k));
}

#[test]
fn gpu_fd_export_maps_in_process_or_reports_no_gpu() {
    let Some(d) = gpu("gpu_fd_export") else {
        return;
    };
    if !d.supports_fd_export() {
        eprintln!("gpu_fd_export: device has no VMM fd export, nothing to check");
        return;
    }
    // A VMM handle imported in the exporting process maps the same physical memory.
    let b = CudaDevice::new(0, Limits::default()).unwrap();
    conformance::ipc_pair(&d, &b, ExportKind::Fd, false).unwrap();
}
