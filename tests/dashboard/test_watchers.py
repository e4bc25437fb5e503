"""The watch registry in the channel layer's Redis: which nodes some browser watches, so that the live
publisher sends their groups only (tests/dashboard/test_live.py shows it doing so)."""

from asgiref.sync import async_to_sync

from apps.dashboard import watchers


def test_a_node_is_watched_while_any_consumer_watches_it(redis_channel_layer):
    async def scenario() -> list[set[int] | None]:
        await watchers.watch("specific.a!1", [1, 2])
        await watchers.watch("specific.b!1", [2])
        seen = [await watchers.watched_nodes()]
        await watchers.unwatch("specific.a!1", [1, 2])
        seen.append(await watchers.watched_nodes())
        return seen

    assert async_to_sync(scenario)() == [{1, 2}, {2}]


def test_a_watch_not_renewed_expires(redis_channel_layer, monkeypatch):
    monkeypatch.setattr(watchers, "WATCH_TTL_S", -1.0)  # already past: a consumer that died long ago
    async_to_sync(watchers.watch)("specific.a!1", [5])
    assert async_to_sync(watchers.watched_nodes)() == set()


def test_on_a_channel_layer_without_the_registry_the_watched_nodes_are_unknown(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [settings.REDIS_URL]},
        }
    }
    async_to_sync(watchers.watch)("specific.a!1", [5])
    assert async_to_sync(watchers.watched_nodes)() is None
