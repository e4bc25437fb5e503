"""XIDs from /dev/kmsg records, in each driver generation's wording."""

from agents.executors.kernel_log import parse_kmsg, read_kmsg

BOOT = 1_780_000_000.0
RECORDS = [
    "6,1201,4512345678,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
    "4,1388,912000123,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    " SUBSYSTEM=pci",
    " DEVICE=+pci:0000:18:00.0",
    "4,1390,913500000,-;NVRM: Xid (PCI:0000:AB:00): 48, pid=2351, name=python, An uncorrectable double bit error",
    "4,1391,914000000,-;NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of "
    "Range",
    "4,1392,915000000,c;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV "
    "error",
]


def test_it_reads_xids_with_and_without_the_pid_part():
    xids = parse_kmsg(RECORDS, BOOT)

    assert [(x.pci_bus_id, x.xid) for x in xids] == [("0000:18:00", 79), ("0000:ab:00", 48), ("0000:3b:00", 13)]
    assert xids[0].ts == BOOT + 912.000123
    assert xids[0].text == "GPU has fallen off the bus."
    assert xids[1].text == "An uncorrectable double bit error"
    assert xids[2].text.startswith("Graphics SM Warp Exception")


def test_it_reads_a_capture_file_as_it_reads_the_device(tmp_path):
    capture = tmp_path / "kmsg"
    capture.write_text("\n".join(RECORDS) + "\n")

    assert read_kmsg(capture) == RECORDS
