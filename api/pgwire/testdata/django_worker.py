# A worker writing with Django's ORM over psycopg2 (Debian's
# python3-django: autocommit by default, the time zone set at connect,
# atomic blocks with a nested savepoint rolled back, bulk_create,
# select_for_update, an UPDATE with F()) through fencegate's PostgreSQL
# listener, as TestDrivers runs it:
#   python3 django_worker.py <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the startup options, SETs
# fencegate.token on each new connection unless set-token is -, then writes
# rows whose v starts with tag. It prints "OK <rows with tag>" or
# "ERR <SQLSTATE> <message>".
import sys

import django
from django.conf import settings

port, fence, token, set_token, table, tag = sys.argv[1:7]
# Not the server's zone: Django SETs TIME ZONE on each new connection,
# before connection_created. With "tz=none" it leaves the zone alone.
zone = None if "tz=none" in sys.argv[7:] else "Europe/Paris"
settings.configure(
    USE_TZ=False, TIME_ZONE=zone, INSTALLED_APPS=[],
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": "postgres", "USER": "worker",
        "HOST": "127.0.0.1", "PORT": port, "CONN_MAX_AGE": 60,
        "OPTIONS": {"options": f"-c fencegate.fence={fence} -c fencegate.token={token}"},
    }})
django.setup()

from django.db import DatabaseError, connection, models, transaction  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402

if set_token != "-":
    # Django's connections are in autocommit: the SET runs outside a
    # transaction block, as the listener takes it.
    def set_fence_token(sender, connection, **kwargs):
        with connection.cursor() as cur:
            cur.execute("SET fencegate.token = %s", [set_token])

    connection_created.connect(set_fence_token)


class Row(models.Model):
    v = models.TextField()

    class Meta:
        app_label = "worker"
        db_table = table
        managed = False


try:
    Row.objects.create(v=f"{tag}-create")
    Row.objects.bulk_create([Row(v=f"{tag}-bulk{i}") for i in range(3)])
    with transaction.atomic():
        Row.objects.create(v=f"{tag}-atomic")
        try:
            with transaction.atomic():
                Row.objects.create(v=f"{tag}-savepoint")
                raise ValueError("roll back to the savepoint")
        except ValueError:
            pass
        r = Row.objects.select_for_update().get(v=f"{tag}-create")
        r.v = f"{tag}-created"
        r.save()
    Row.objects.filter(v=f"{tag}-bulk0").update(v=models.functions.Concat(models.F("v"), models.Value("u")))
    with connection.cursor() as cur:
        cur.execute("SHOW TIME ZONE")
        if zone is not None and cur.fetchone()[0] != zone:
            raise RuntimeError("Django's SET TIME ZONE did not hold")
    print("OK", Row.objects.filter(v__startswith=f"{tag}-").count())
except DatabaseError as e:
    cause = e.__cause__
    print("ERR", getattr(cause, "pgcode", None), str(cause or e).strip().splitlines()[0])
