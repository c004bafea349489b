"""The pages the service serves to a browser, ``/docs`` (Swagger UI), the GraphiQL page of
``/graphql`` and the pipeline board at ``/board``, and the files they load: pinned npm builds in
``assets/`` (its README says which, and under which licences), and the board's own in
``board/``."""
