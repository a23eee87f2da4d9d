"""A job's life in the database: its specification checked (`job_spec`, `pod_spec`,
`validation`, `array_spec`), its submission written (`submit`, `submission_sql`, `arrays`,
`dependencies`), every move through the state machine (`transitions`, `cancel`, `checkpoint`,
`start_failures`) and the cycle's bulk writes on pending and admitted jobs (`holds`, `pending`,
`admissions`, bound column by column through `column_arrays`)."""
