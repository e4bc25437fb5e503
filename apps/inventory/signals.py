"""Keep each port's derived columns (``_link``, ``_peer_*``) in step with its link, so that
"what is this port connected to" and "which nodes hang off this leaf" are single queries."""

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from apps.inventory.models import LinkTermination, NetworkPort, SwitchPort


def _endpoint_rows(termination: LinkTermination) -> Any:
    if termination.network_port_id:
        return NetworkPort.objects.filter(pk=termination.network_port_id)
    return SwitchPort.objects.filter(pk=termination.switch_port_id)


def refresh_link_paths(link_id: int) -> None:
    ends = {t.end: t for t in LinkTermination.objects.filter(link_id=link_id)}
    for end, other_end in (("A", "B"), ("B", "A")):
        termination, other = ends.get(end), ends.get(other_end)
        if termination is None:
            continue
        _endpoint_rows(termination).update(
            _link_id=link_id,
            _peer_network_port_id=other.network_port_id if other else None,
            _peer_switch_port_id=other.switch_port_id if other else None,
        )


@receiver(post_save, sender=LinkTermination)
def termination_saved(sender: type, instance: LinkTermination, **kwargs: Any) -> None:
    refresh_link_paths(instance.link_id)


@receiver(post_delete, sender=LinkTermination)
def termination_deleted(sender: type, instance: LinkTermination, **kwargs: Any) -> None:
    _endpoint_rows(instance).update(_link_id=None, _peer_network_port_id=None, _peer_switch_port_id=None)
    refresh_link_paths(instance.link_id)
