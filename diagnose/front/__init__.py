"""The application services below the command line (diagnose/commands): what a path is (target), one
analysis per kind (pipeline), the staged output folder (output), stdout, the notebook object (api),
the bundled demo capture (bundled), and the services behind `diagnose diff` and `diagnose probe`."""
