"""`field__any=[…]`: `field = ANY(%s)` with the whole list as one array parameter.

`field__in=[…]` sends one parameter per value: at tens of thousands of ids (a cycle's pending
jobs, a wave of admissions) building and binding them cost more than the query itself.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field, Lookup


@Field.register_lookup
class AnyOf(Lookup):
    lookup_name = "any"

    def get_prep_lookup(self) -> list[Any]:
        return [self.lhs.output_field.get_prep_value(v) for v in self.rhs]

    def get_db_prep_lookup(self, value: Any, connection: Any) -> tuple[str, list[Any]]:
        field = self.lhs.output_field
        return "%s", [[field.get_db_prep_value(v, connection, prepared=True) for v in value]]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        cast = self.lhs.output_field.cast_db_type(connection)
        return f"{lhs} = ANY({rhs}::{cast}[])", [*lhs_params, *rhs_params]
