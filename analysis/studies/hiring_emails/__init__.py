"""analysis.studies.hiring_emails"""
