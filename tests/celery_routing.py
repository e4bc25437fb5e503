from controlplane.celery import app


def queue_of(task_name: str) -> str:
    """The queue Celery routes a task to, from the routes in settings."""
    return app.amqp.router.route({}, task_name)["queue"].name
