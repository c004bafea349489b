"""The pages the service serves to a browser, ``/docs`` (Swagger UI) and the GraphiQL page of
``/graphql``, and the files they load, which the package ships in ``assets/`` (pinned npm
builds; its README says which, and under which licences)."""
